package runner

import (
	"strconv"
	"strings"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// KeyOf is the key of the request's session: its sessionId within its
// project (projectOf). The zero key means a turn without a session.
func KeyOf(r *wire.Request) store.SessionKey {
	if r.SessionID == "" {
		return store.SessionKey{}
	}
	return store.SessionKey{ProjectID: projectOf(r), SessionID: r.SessionID}
}

// poolKey is k as the warm pools and the sandbox state key name it, one
// string per key: project:session, as before projects keyed the store,
// when the project holds no ':' (the first one then splits it) and does
// not start with the quoted form's marker; else the marker and the
// project quoted, so that no two keys meet.
func poolKey(k store.SessionKey) string {
	if !strings.Contains(k.ProjectID, ":") && !strings.HasPrefix(k.ProjectID, "\x00") {
		return k.ProjectID + ":" + k.SessionID
	}
	return "\x00" + strconv.Quote(k.ProjectID) + ":" + k.SessionID
}
