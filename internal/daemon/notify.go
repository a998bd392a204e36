package daemon

import (
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// notifier sends sd_notify(3) messages (READY=1, STATUS=, WATCHDOG=1) to
// the socket NOTIFY_SOCKET names, from one datagram socket kept open
// between them: a library's one-shot call dialled a socket for every
// message, which cost more CPU than the watchdog's own checks at a
// thousand leases. The socket is not connected: each message is sent to
// the path, so a manager that binds a new socket there gets the next one,
// even while its old socket is still open. A message is sent without
// waiting: one the manager's queue has no room for (it is not reading)
// is dropped and logged at debug level, like one that cannot be sent at
// all; a READY=1, STOPPING=1 or the latest STATUS= goes out again before
// the next message (the watchdog pings every third of its interval). A
// sender never waits for the manager (senders take turns only for the
// send itself, which returns at once); a ping that never arrives is the
// watchdog's business, not the sender's.
type notifier struct {
	log  *slog.Logger
	addr *unix.SockaddrUnix // nil: not started with a notify socket; guarded by mu

	mu      sync.Mutex
	pending []string // dropped messages that still matter, in order; guarded by mu
	fd      int      // -1 until the first message, or while the socket cannot be made; guarded by mu
}

func newNotifier(log *slog.Logger) *notifier {
	n := &notifier{log: log, fd: -1}
	if path := os.Getenv("NOTIFY_SOCKET"); path != "" {
		// A name that starts with '@' is an abstract socket; unix reads
		// it so.
		n.addr = &unix.SockaddrUnix{Name: path}
	}
	return n
}

// send sends one message, after any dropped before that still matter.
// It holds mu while it does (the socket address is written into as it is
// sent, and the messages keep their order), which is brief: a send never
// waits.
func (n *notifier) send(state string) {
	if n.addr == nil {
		return
	}
	n.mu.Lock()
	queue := append(n.pending, state)
	n.pending = nil
	var err error
	for _, m := range queue {
		if e := n.sendOne(m); e != nil {
			err = e
			n.keep(m)
		}
	}
	n.mu.Unlock()
	if err != nil {
		n.log.Debug("sd_notify: " + err.Error())
	}
}

// keep holds a dropped message for the next send, unless a later one
// makes it moot: a watchdog ping is for its moment only, and a STATUS=
// gives way to the next. READY=1 and STOPPING=1 are kept until they are
// sent: systemd waits for them. Called with mu held.
func (n *notifier) keep(m string) {
	switch {
	case m == "WATCHDOG=1":
		return
	case strings.HasPrefix(m, "STATUS="):
		n.pending = slices.DeleteFunc(n.pending, func(p string) bool { return strings.HasPrefix(p, "STATUS=") })
	}
	n.pending = append(n.pending, m)
}

func (n *notifier) sendOne(m string) error {
	if err := n.socket(); err != nil {
		return err
	}
	return unix.Sendto(n.fd, []byte(m), unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, n.addr)
}

// socket makes the kept socket on first use; it is never closed (it lives
// as long as the daemon). Called with mu held.
func (n *notifier) socket() error {
	if n.fd >= 0 {
		return nil
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return err
	}
	n.fd = fd
	return nil
}
