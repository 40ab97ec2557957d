package sandboxd

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentrunner/runner/internal/logkey"
)

// TokenEnv is the environment variable that carries the daemon's token
// when --token-file is not given.
const TokenEnv = "RUNNER_SANDBOXD_TOKEN"

// ListenEnv, when set, overrides --listen.
const ListenEnv = "RUNNER_SANDBOXD_LISTEN"

// DefaultPort is the port the daemon listens on unless told otherwise.
const DefaultPort = 2468

// Main runs `runner sandboxd`; args are the arguments after the
// subcommand. It returns the process exit code.
//
// With --detach the daemon starts itself again in the background (in a
// session of its own, output to <state-dir>/sandboxd.log), waits until
// that copy listens, and exits 0, or 1 with the copy's log. That makes a
// synchronous remote exec (the Daytona toolbox's) a start-and-wait-until-
// ready in one call. The daemon holds an flock on <state-dir>/sandboxd.lock
// and replaces the daemon holding it, so starting it again after a version
// change or a runner restart needs no separate stop; a daemon from before
// a sandbox restart left no lock, so no stranger is ever signalled.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "0.0.0.0:"+strconv.Itoa(DefaultPort), "TCP address of the HTTP API")
	tokenFile := fs.String("token-file", "", "file holding the token (default $"+TokenEnv+")")
	version := fs.String("runner-version", "", "version reported by /v1/health")
	stateDir := fs.String("state-dir", "", "directory for the lock, log and socket (default $HOME/.runner-sandboxd)")
	workdir := fs.String("workdir", "", "default working directory of processes (default the current directory)")
	detach := fs.Bool("detach", false, "start in the background and exit once it listens")
	readyFD := fs.Int("ready-fd", 0, "internal: file descriptor to report readiness on")
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout) // asked-for help is output, not an error
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	// The environment wins over --listen so that a host which maps ports
	// (the Daytona test fake runs many sandboxes on one machine) can place
	// the daemon without the runner knowing.
	if v := getenv(ListenEnv); v != "" {
		*listen = v
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	fail := func(err error) int {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return 1
	}

	if *stateDir == "" {
		home := getenv("HOME")
		if home == "" {
			return fail(errors.New("no --state-dir and no $HOME"))
		}
		*stateDir = filepath.Join(home, ".runner-sandboxd")
	}
	if err := os.MkdirAll(*stateDir, 0o700); err != nil {
		return fail(err)
	}
	if *detach {
		return detachSelf(ctx, args, *stateDir, stdout, stderr)
	}

	token := getenv(TokenEnv)
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fail(err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return fail(fmt.Errorf("no token: set $%s or --token-file", TokenEnv))
	}

	lock, err := acquireLock(ctx, filepath.Join(*stateDir, "sandboxd.lock"), logger)
	if err != nil {
		return fail(err)
	}
	defer lock.release()
	ln, err := listenRetry(ctx, "tcp", *listen)
	if err != nil {
		return fail(err)
	}
	sock := socketPath(*stateDir)
	_ = os.Remove(sock)
	uln, err := net.Listen("unix", sock)
	if err != nil {
		ln.Close()
		return fail(err)
	}
	_ = os.Chmod(sock, 0o600)
	// The bound address, for hosts that let the daemon pick its port
	// (--listen 127.0.0.1:0): the test fake proxies to it.
	addrFile := filepath.Join(*stateDir, "sandboxd.addr")
	_ = os.WriteFile(addrFile, []byte(ln.Addr().String()), 0o600)

	srv, err := NewServer(Config{
		Token: token, Version: *version, Workdir: *workdir, Home: getenv("HOME"),
		Socket: sock, Logger: logger,
	})
	if err != nil {
		ln.Close()
		uln.Close()
		return fail(err)
	}
	// No read or write timeout: streams live as long as a prompt does.
	api := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second}
	local := &http.Server{Handler: srv.DialHandler(), ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- api.Serve(ln) }()
	go func() { errc <- local.Serve(uln) }()
	logger.Info("sandboxd listening", logkey.Addr, ln.Addr().String(), "socket", sock, "version", *version)
	if *readyFD > 0 {
		f := os.NewFile(uintptr(*readyFD), "ready")
		_, _ = fmt.Fprintf(f, "ready %d\n", os.Getpid())
		f.Close()
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Close() // ends the streams first, so Shutdown does not wait on them
	_ = api.Shutdown(sctx)
	_ = local.Shutdown(sctx)
	for range 2 - btoi(serveErr != nil) {
		<-errc
	}
	// Still under the lock: these are ours, not a successor's.
	_ = os.Remove(sock)
	_ = os.Remove(addrFile)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fail(serveErr)
	}
	return 0
}

// socketPath is the unix socket in stateDir, or, when that path is too
// long for a socket address (108 bytes on Linux), one in the temp dir
// named after stateDir.
func socketPath(stateDir string) string {
	p := filepath.Join(stateDir, "sandboxd.sock")
	if len(p) < 100 {
		return p
	}
	sum := sha256.Sum256([]byte(stateDir))
	return filepath.Join(os.TempDir(), "runner-sandboxd-"+hex.EncodeToString(sum[:6])+".sock")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// listenRetry listens on addr, retrying for a few seconds while the port
// is still held by a daemon being replaced.
func listenRetry(ctx context.Context, network, addr string) (net.Listener, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen(network, addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return ln, err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// detachSelf starts the daemon again without --detach, in its own session,
// and waits until it reports that it listens.
func detachSelf(ctx context.Context, args []string, stateDir string, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return 1
	}
	var child []string
	for _, a := range args {
		if a != "--detach" && a != "-detach" && !strings.HasPrefix(a, "--detach=") && !strings.HasPrefix(a, "-detach=") {
			child = append(child, a)
		}
	}
	logPath := filepath.Join(stateDir, "sandboxd.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return 1
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return 1
	}
	defer r.Close()
	cmd := exec.Command(exe, append([]string{"sandboxd", "--ready-fd=3", "--state-dir=" + stateDir}, child...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		fmt.Fprintf(stderr, "sandboxd: start: %v\n", err)
		return 1
	}
	w.Close()
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	// A daemon that neither listens nor fails within this long is stuck;
	// the caller (a synchronous remote exec) must get an answer.
	timer := time.AfterFunc(30*time.Second, func() { r.Close() })
	defer timer.Stop()
	line, _ := bufio.NewReader(r).ReadString('\n')
	if strings.HasPrefix(line, "ready ") {
		// The daemon lives on; reap nothing, it belongs to init now.
		_ = cmd.Process.Release()
		fmt.Fprint(stdout, line)
		return 0
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	b, _ := os.ReadFile(logPath)
	fmt.Fprintf(stderr, "sandboxd: the daemon did not start:\n%s\n", b)
	return 1
}
