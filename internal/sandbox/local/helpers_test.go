package local_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentrunner/runner/internal/sandbox/local"
)

// helpers are programs the test binary runs as inside a sandbox (see
// TestMain), so escape tests need no curl or compiler in the sandbox. Each
// prints what happened and exits 0 on success.
var helpers = map[string]func(args []string) int{
	"dial":      helperDial,
	"http-get":  helperHTTPGet,
	"hog":       helperHog,
	"syscalls":  helperSyscalls,
	"dial-unix": helperDialUnix,
	"new":       helperNew,
}

// helperDialUnix connects to the unix socket args[0] and prints the first
// line it reads.
func helperDialUnix(args []string) int {
	c, err := net.DialTimeout("unix", args[0], 10*time.Second)
	if err != nil {
		fmt.Println("dial error:", err)
		return 1
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println("read error:", err)
		return 1
	}
	fmt.Print(line)
	return 0
}

// helperNew makes a bwrap provider in dir args[0], with limits unless
// args[1] is "nolimits", and prints New's error.
func helperNew(args []string) int {
	cfg := local.Config{Dir: args[0]}
	if len(args) > 1 && args[1] == "nolimits" {
		cfg.MemoryMB, cfg.Pids, cfg.CPUs, cfg.DiskMB = local.NoLimit, local.NoLimit, local.NoLimit, local.NoLimit
	}
	if _, err := local.New(cfg); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("ok")
	return 0
}

// helperDial connects to args[0] and prints the first line it reads.
func helperDial(args []string) int {
	c, err := net.DialTimeout("tcp", args[0], 10*time.Second)
	if err != nil {
		fmt.Println("dial error:", err)
		return 1
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println("read error:", err)
		return 1
	}
	fmt.Print(line)
	return 0
}

// helperHTTPGet fetches args[0] through $HTTP_PROXY (also for loopback
// hosts, which Go's ProxyFromEnvironment would not proxy) and prints the
// status and body.
func helperHTTPGet(args []string) int {
	pu, err := url.Parse(os.Getenv("HTTP_PROXY"))
	if err != nil || pu.Host == "" {
		fmt.Println("no HTTP_PROXY")
		return 1
	}
	c := &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			Proxy:           http.ProxyURL(pu),
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the test server's own certificate
		},
	}
	resp, err := c.Get(args[0])
	if err != nil {
		fmt.Println("get error:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, body)
	return 0
}

// helperHog allocates and touches args[0] MiB.
func helperHog(args []string) int {
	var mib int
	fmt.Sscan(args[0], &mib)
	var keep [][]byte
	for range mib {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	fmt.Println("allocated", len(keep))
	return 0
}

// helperSyscalls tries syscalls the filter denies and prints one line per
// syscall: its name and the errno (or "ok").
func helperSyscalls([]string) int {
	try := func(name string, fn func() error) {
		if err := fn(); err != nil {
			fmt.Printf("%s %v\n", name, err)
		} else {
			fmt.Printf("%s ok\n", name)
		}
	}
	try("getpid", func() error { unix.Getpid(); return nil })
	try("mkdir", func() error { return unix.Mkdir(os.TempDir()+"/helper-dir", 0o755) })
	try("mount", func() error { return unix.Mount("none", "/tmp", "tmpfs", 0, "") })
	try("unshare", func() error { return unix.Unshare(unix.CLONE_NEWUSER) })
	try("ptrace", func() error {
		_, _, e := unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
		return errnoErr(e)
	})
	try("bpf", func() error {
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
		return errnoErr(e)
	})
	try("keyctl", func() error {
		_, _, e := unix.Syscall(unix.SYS_KEYCTL, 0, 0, 0)
		return errnoErr(e)
	})
	try("perf_event_open", func() error {
		_, _, e := unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, 0, 0, 0, 0)
		return errnoErr(e)
	})
	try("personality-query", func() error {
		_, _, e := unix.Syscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0)
		return errnoErr(e)
	})
	try("personality-no-aslr", func() error {
		_, _, e := unix.Syscall(unix.SYS_PERSONALITY, 0x0040000, 0, 0) // ADDR_NO_RANDOMIZE
		return errnoErr(e)
	})
	try("tiocsti", func() error {
		c := byte('x')
		_, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		return errnoErr(e)
	})
	try("ioctl-fionread", func() error { // control: other ioctls pass (stdin is a pipe)
		_, err := unix.IoctlGetInt(0, unix.TIOCINQ)
		return err
	})
	try("clone-newuser", func() error {
		_, _, e := unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		return errnoErr(e)
	})
	return 0
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
