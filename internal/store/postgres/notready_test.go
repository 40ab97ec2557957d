package postgres_test

import (
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/storetest"
)

// TestOpenWaitsForAStartingServer: a server that answers its first
// connections with 57P03 ("the database system is starting up", as a
// database container does while its first boot restarts the server) does
// not fail Open; the store opens once the server takes connections.
func TestOpenWaitsForAStartingServer(t *testing.T) {
	dsn := storetest.PostgresSchema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	real := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if refused.Add(1) <= 3 {
					startingUp(c)
					return
				}
				up, err := net.Dial("tcp", real)
				if err != nil {
					return
				}
				defer up.Close()
				wg.Add(1)
				go func() { defer wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	u.Host = ln.Addr().String()
	st, err := postgres.Open(t.Context(), u.String())
	if err != nil {
		t.Fatalf("Open against a server starting up: %v", err)
	}
	defer st.Close()
	if n := refused.Load(); n < 4 {
		t.Fatalf("%d connections: the refusals were not met", n)
	}
	if err := st.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// startingUp reads a startup message and answers as a server that is
// starting up: a FATAL ErrorResponse with SQLSTATE 57P03.
func startingUp(c net.Conn) {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(n[:]))-4); err != nil {
		return
	}
	var body []byte
	for _, f := range []struct {
		code byte
		v    string
	}{{'S', "FATAL"}, {'V', "FATAL"}, {'C', "57P03"}, {'M', "the database system is starting up"}} {
		body = append(append(append(body, f.code), f.v...), 0)
	}
	body = append(body, 0)
	msg := append([]byte{'E', 0, 0, 0, 0}, body...)
	binary.BigEndian.PutUint32(msg[1:5], uint32(len(body)+4))
	_, _ = c.Write(msg)
}
