package relay

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
)

// MCPStdio is `runner mcp-stdio`: the harness's stdio MCP server inside
// the sandbox. It connects to the relay socket ($RUNNER_TOOLS_SOCKET or
// --socket), presents $RUNNER_TOOLS_SECRET, and copies stdin to the
// socket and the socket to stdout. The secret is read only from the
// environment, never from args, where other processes could see it.
//
// It returns the exit code: 0 when stdin ended (the harness closed the
// server), 1 when it could not start (missing settings, no socket, a
// refused token) or the runner ended the connection, 2 on bad usage;
// the reason goes to stderr. Failing loudly matters: a harness that
// silently gets no tools is the failure this path exists to prevent.
func MCPStdio(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("mcp-stdio", flag.ContinueOnError)
	fl.SetOutput(stderr)
	socket := fl.String("socket", "", "relay socket path (default $"+EnvSocket+")")
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fl.SetOutput(stdout) // asked-for help is output, not an error
		}
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *socket == "" {
		*socket = getenv(EnvSocket)
	}
	token := getenv(EnvToken)
	if *socket == "" || token == "" {
		fmt.Fprintf(stderr, "runner mcp-stdio: %s and %s must be set\n", EnvSocket, EnvToken)
		return 1
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", *socket)
	if err != nil {
		fmt.Fprintf(stderr, "runner mcp-stdio: connect to tool relay: %v\n", err)
		return 1
	}
	if err := Client(ctx, conn, token, stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "runner mcp-stdio: %v\n", err)
		return 1
	}
	return 0
}

// Client authenticates with token over conn and then relays: stdin to
// conn, conn to stdout. It returns nil when stdin ends (after the relay
// has answered and closed its side), and an error when the hello is
// refused (wrapping ErrUnauthorized) or the relay closes first. conn is
// closed on return. Cancelling ctx closes conn.
//
// The stdin copier exits when stdin ends or a write to conn fails. When
// the relay closes first, Client returns without waiting for it: a read
// from a pipe cannot be interrupted, and the process exits on return.
func Client(ctx context.Context, conn io.ReadWriteCloser, token string, stdin io.Reader, stdout io.Writer) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := io.WriteString(conn, helloPrefix+token+"\n"); err != nil {
		return fmt.Errorf("tool relay hello: %w", err)
	}
	br := bufio.NewReader(conn)
	reply, err := readLine(br, maxHello)
	if err != nil {
		return fmt.Errorf("tool relay hello: %w", err)
	}
	if reply+"\n" != helloOK {
		return fmt.Errorf("%w: %s", ErrUnauthorized, strings.TrimPrefix(reply, "ERR "))
	}

	var (
		wg        sync.WaitGroup
		stdinDone atomic.Bool // set before the half-close, so it is seen once stdout's copy ends
		stdinErr  error
	)
	wg.Go(func() {
		_, stdinErr = io.Copy(conn, stdin)
		stdinDone.Store(true)
		// Half-close so the relay sees the end of the session and closes
		// its side, which ends the copy to stdout below.
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			conn.Close()
		}
	})
	_, copyErr := io.Copy(stdout, br)
	if stdinDone.Load() {
		wg.Wait()
		if stdinErr != nil {
			return fmt.Errorf("read stdin: %w", stdinErr)
		}
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if copyErr != nil && !errors.Is(copyErr, net.ErrClosed) {
		return fmt.Errorf("tool relay connection: %w", copyErr)
	}
	return errors.New("tool relay closed the connection")
}
