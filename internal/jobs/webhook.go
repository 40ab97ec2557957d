package jobs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
)

// Webhooks are signed as the Standard Webhooks specification says: the
// headers webhook-id, webhook-timestamp (Unix seconds) and
// webhook-signature, "v1,<base64 HMAC-SHA256 of id.timestamp.body>".
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// ParseSecret decodes a secret as the specification writes it, whsec_
// and base64; any other string is its own bytes.
func ParseSecret(s string) []byte {
	if rest, ok := strings.CutPrefix(s, "whsec_"); ok {
		if b, err := base64.StdEncoding.DecodeString(rest); err == nil {
			return b
		}
	}
	return []byte(s)
}

// Sign returns the webhook-signature header's value.
func Sign(secret []byte, id string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verify reports whether header (space-separated signatures, as a
// receiver gets during a secret's rotation) holds a valid one.
func Verify(secret []byte, id string, ts int64, body []byte, header string) bool {
	want := Sign(secret, id, ts, body)
	for _, sig := range strings.Fields(header) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}
