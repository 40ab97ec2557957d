package river

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// sealer keeps a request's secrets (credentials, headers, the callback
// bearer) in the job row only encrypted, AES-256-GCM under the operator's
// key: a copy of the database alone yields no credential.
type sealer struct{ aead cipher.AEAD }

// SealKeyEnv is the setting holding the key.
const SealKeyEnv = "AGENTA_RUNNER_JOBS_SEAL_KEY"

func newSealer(key []byte) (*sealer, error) {
	if len(key) == 0 {
		return nil, nil
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("%s: %d bytes, want 32 (64 hex digits)", SealKeyEnv, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal returns the sealed secrets, "" for none. The job id is the
// additional data: a sealed value moved to another row does not open.
func (s *sealer) seal(id string, secrets *wire.Request) (string, error) {
	if secrets == nil {
		return "", nil
	}
	if s == nil {
		return "", errdefs.Invalidf("request: it carries credentials (modelConnection credentials or environment, headers, toolCallback authorization), which a job keeps on disk only sealed; the operator sets %s (32 bytes, hex) to allow it", SealKeyEnv)
	}
	plain, err := json.Marshal(secrets)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, []byte(id))), nil
}

func (s *sealer) open(id, sealed string) (*wire.Request, error) {
	if sealed == "" {
		return nil, nil
	}
	if s == nil {
		return nil, fmt.Errorf("job %s: its credentials are sealed, and %s is not set on this replica", id, SealKeyEnv)
	}
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(b) < s.aead.NonceSize() {
		return nil, fmt.Errorf("job %s: sealed credentials: malformed", id)
	}
	plain, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], []byte(id))
	if err != nil {
		return nil, errors.New("job " + id + ": sealed credentials do not open with this replica's " + SealKeyEnv + " (was it changed?)")
	}
	var req wire.Request
	if err := json.Unmarshal(plain, &req); err != nil {
		return nil, fmt.Errorf("job %s: sealed credentials: %w", id, err)
	}
	return &req, nil
}
