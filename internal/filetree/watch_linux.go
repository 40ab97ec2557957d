package filetree

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// openLocked opens the notifier's inotify descriptor and starts the
// goroutine that reads it, unless it runs already. A watch here is never
// broken from the start ("").
func (n *Notifier) openLocked(root string) (broken string, err error) {
	if n.f != nil {
		return "", nil
	}
	initFn := n.init
	if initFn == nil {
		initFn = func() (int, error) { return unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC) }
	}
	fd, err := initFn()
	if err != nil {
		return "", fmt.Errorf("watch %s: inotify: %w (fs.inotify.max_user_instances)", root, err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return "", fmt.Errorf("watch %s: %w", root, err)
	}
	n.f, n.rc, n.done, n.wds = f, rc, make(chan struct{}), map[int32]dirWatch{}
	if n.buf == nil {
		n.buf = make([]byte, 64<<10)
	}
	go n.read(f, rc, n.done)
	return "", nil
}

// read drains the descriptor whenever it is readable, until it is closed.
func (n *Notifier) read(f *os.File, rc syscall.RawConn, done chan struct{}) {
	defer close(done)
	_ = rc.Read(func(fd uintptr) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.f != f {
			return true
		}
		n.drainLocked(int(fd))
		return false // wait until readable again
	})
}

func (n *Notifier) drainLocked(fd int) {
	for {
		c, err := unix.Read(fd, n.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if err != nil || c <= 0 {
			n.allFullLocked(fmt.Sprintf("reading inotify events failed: %v", err))
			return
		}
		n.events(n.buf[:c])
	}
}

// takeLocked takes the events queued now, before a scan reads anything.
func (n *Notifier) takeLocked() {
	if n.f != nil {
		_ = n.rc.Control(func(fd uintptr) { n.drainLocked(int(fd)) })
	}
}

func (n *Notifier) events(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		name := string(b[unix.SizeofInotifyEvent:end])
		if i := strings.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		n.event(ev.Wd, ev.Mask, name)
		b = b[end:]
	}
}

func (n *Notifier) event(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		n.allFullLocked("the kernel's inotify queue overflowed (fs.inotify.max_queued_events): events were lost")
		return
	}
	dw, ok := n.wds[wd]
	if !ok {
		return
	}
	w, rel := dw.w, dw.rel
	switch {
	case mask&unix.IN_IGNORED != 0:
		delete(n.wds, wd)
		if w.wdOf[rel] == wd {
			delete(w.wdOf, rel)
		}
		w.gone(rel)
		return
	case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0:
		w.gone(rel)
		return
	case name == "":
		// The directory's own metadata: its entry is in its parent.
		if rel != "" {
			w.mark(parent(rel))
		}
		return
	}
	child := name
	if rel != "" {
		child = rel + "/" + name
	}
	if Excluded(child, w.exclude) {
		return
	}
	w.mark(rel)
	if mask&unix.IN_ISDIR != 0 && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
		w.fresh[child] = true
	}
}

// addLocked adds (or finds) the kernel watch of the directory abs.
func (n *Notifier) addLocked(abs string) (int32, error) {
	add := n.addWatch
	if add == nil {
		add = unix.InotifyAddWatch
	}
	var wd int
	var err error
	if cerr := n.rc.Control(func(fd uintptr) { wd, err = add(int(fd), abs, watchMask) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		if gone(err) {
			return 0, err
		}
		if errors.Is(err, unix.ENOSPC) {
			return 0, errWatchLimit
		}
		return 0, fmt.Errorf("watch %s: %w", abs, err)
	}
	return int32(wd), nil
}

// rmLocked stops the kernel watch wd.
func (n *Notifier) rmLocked(wd int32) {
	delete(n.wds, wd)
	if n.f != nil {
		_ = n.rc.Control(func(fd uintptr) { _, _ = unix.InotifyRmWatch(int(fd), uint32(wd)) })
	}
}
