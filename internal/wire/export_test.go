package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
)

// ReferenceDecode is Decode as it was before it became one pass: the
// body into a map to find the retired fields, then into the Request. The
// fuzz target holds Decode to it.
func ReferenceDecode(body []byte) (*Request, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errdefs.Invalidf("Invalid JSON: empty body; send a run request object")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, errdefs.Invalidf("Invalid JSON: %s", describe(err))
	}
	var legacy []string
	for _, f := range legacyFields {
		if _, ok := top[f]; ok {
			legacy = append(legacy, f)
		}
	}
	if len(legacy) > 0 {
		return nil, errdefs.Invalidf("Legacy top-level model credential fields are not supported (%s); send them inside modelConnection", strings.Join(legacy, ", "))
	}
	var req Request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return nil, errdefs.Invalidf("Invalid JSON: %s", describe(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errdefs.Invalidf("Invalid JSON: unexpected data after the request object")
	}
	if err := req.validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// TakesFastPath reports whether decodeFast reads body itself.
func TakesFastPath(body []byte) bool {
	_, ok := decodeFast(body, nil)
	return ok
}
