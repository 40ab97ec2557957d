package sandboxd

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
)

// ForwardMain is `runner channel-forward LISTEN NAME`, run inside a remote
// sandbox: it listens on LISTEN (the sandbox's loopback), prints "ready",
// and splices every connection to the runner's channel NAME through the
// daemon (its socket from SocketEnv). It serves until killed. The key
// gateway reaches harnesses this way: they talk plain HTTP to loopback.
func ForwardMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "usage: runner channel-forward LISTEN NAME")
		return 2
	}
	listen, name := args[0], args[1]
	sock := getenv(SocketEnv)
	if sock == "" {
		fmt.Fprintf(stderr, "runner channel-forward: %s is not set\n", SocketEnv)
		return 1
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(stderr, "runner channel-forward:", err)
		return 1
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	fmt.Fprintln(stdout, "ready")
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			up, err := Dial(ctx, sock, name)
			if err != nil {
				fmt.Fprintln(stderr, "runner channel-forward:", err)
				return
			}
			defer up.Close()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(up, c)
				if cw, ok := up.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				close(done)
			}()
			_, _ = io.Copy(c, up)
			if cw, ok := c.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			<-done
		}()
	}
}
