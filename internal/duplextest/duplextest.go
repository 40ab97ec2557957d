// Package duplextest checks that an HTTP proxy is full duplex: that it
// keeps reading a request's body after it has started to write the
// response.
//
// A net/http handler is not, by default: the first write of its response
// discards what is left of the request body and closes it. A proxy whose
// transport is still sending that body upstream then fails its read, and
// the transport closes the upstream connection mid-response: the client
// gets a stream cut short ("unexpected EOF"), and only when the upstream
// answered before the proxy's transport had read the body's end, which
// under load is now and then. Check makes that order certain instead: the
// client sends its body only once the response's headers have arrived.
package duplextest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// patience bounds the wait for a proxy that is not full duplex: it holds
// the response's headers until it has read a body the client sends only
// after them, so nothing moves.
const patience = 20 * time.Second

// Upstream starts a server that answers each request's headers at once,
// before reading its body, and then echoes the body back.
func Upstream(tb testing.TB) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		_, _ = io.Copy(w, r.Body)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// Check sends a request through client to url (through the proxy under
// test, to an Upstream) whose body is written only after the response's
// headers have arrived, and fails tb unless the body comes back whole.
// header is added to the request as name, value pairs.
func Check(tb testing.TB, client *http.Client, url string, header ...string) {
	tb.Helper()
	// ~120 kB: several reads, yet under the 256 kB a net/http handler
	// that is not full duplex drains before its response's headers.
	body := bytes.Repeat([]byte("full duplex "), 10_000)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	// A cancelled request still waits for its body's read to end.
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	if err != nil {
		tb.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("no response headers before the request body was sent (within %v): the proxy is not full duplex: %v", patience, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		tb.Fatalf("status %s: %s", resp.Status, b)
	}
	written := make(chan error, 1)
	go func() {
		_, err := pw.Write(body)
		pw.CloseWithError(err)
		written <- err
	}()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Errorf("the echoed body broke off after %d of %d bytes: %v", len(got), len(body), err)
	} else if !bytes.Equal(got, body) {
		tb.Errorf("the echoed body is %d bytes, want the %d sent", len(got), len(body))
	}
	cancel()
	<-written
}
