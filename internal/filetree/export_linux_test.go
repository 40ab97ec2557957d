package filetree

import "golang.org/x/sys/unix"

// InjectOverflow queues what the kernel reports when its event queue
// overflowed.
func (n *Notifier) InjectOverflow() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.event(-1, unix.IN_Q_OVERFLOW, "")
}
