package daemon

import (
	"log/slog"
	"net"
	"os"
	"sync"
)

// notifier sends sd_notify(3) messages (READY=1, STATUS=, WATCHDOG=1)
// to the socket NOTIFY_SOCKET names, over one datagram socket kept open
// between them. Dialling a socket for every message, as a library's
// one-shot call does, cost more CPU than the watchdog's own checks at a
// thousand leases. A message that cannot be sent on the kept socket (the
// manager made its socket anew, say after a re-exec) is sent again on a
// new one, once; one that fails again is logged at debug level and
// dropped: systemd counts the watchdog's pings, and a ping that never
// arrives is the watchdog's business, not the sender's.
type notifier struct {
	log  *slog.Logger
	addr *net.UnixAddr // nil: not started by systemd with a notify socket

	mu   sync.Mutex
	conn *net.UnixConn
}

func newNotifier(log *slog.Logger) *notifier {
	n := &notifier{log: log}
	if path := os.Getenv("NOTIFY_SOCKET"); path != "" {
		// A name that starts with '@' is an abstract socket; the net
		// package reads it so.
		n.addr = &net.UnixAddr{Name: path, Net: "unixgram"}
	}
	return n
}

// send sends one message; it never blocks on the manager (datagrams to
// a full socket fail at once).
func (n *notifier) send(state string) {
	if n.addr == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	err := n.write(state)
	if err != nil && n.conn != nil {
		n.conn.Close()
		n.conn = nil
		err = n.write(state)
	}
	if err != nil {
		n.log.Debug("sd_notify: " + err.Error())
		if n.conn != nil {
			n.conn.Close()
			n.conn = nil
		}
	}
}

func (n *notifier) write(state string) error {
	if n.conn == nil {
		c, err := net.DialUnix("unixgram", nil, n.addr)
		if err != nil {
			return err
		}
		n.conn = c
	}
	_, err := n.conn.Write([]byte(state))
	return err
}
