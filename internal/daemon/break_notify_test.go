package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// brkTryRead reads one datagram from c if one is queued, without waiting.
func brkTryRead(t *testing.T, c *net.UnixConn) (string, bool) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4096)
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), b, unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if rerr != nil {
		return "", false
	}
	return string(b[:n]), true
}

// brkListenAbstract makes an abstract notify socket, as a manager in a
// container may.
func brkListenAbstract(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	name := fmt.Sprintf("@unitlease-brk-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return name, c
}

// An abstract NOTIFY_SOCKET ("@name") gets every message over the kept
// socket, and a manager that made its abstract socket anew gets the next.
func TestBreakNotifierAbstractSocket(t *testing.T) {
	name, c := brkListenAbstract(t)
	t.Setenv("NOTIFY_SOCKET", name)
	n := newNotifier(slog.New(slog.DiscardHandler))
	for _, m := range []string{"READY=1", "WATCHDOG=1", "STATUS=x"} {
		n.send(m)
		if got, ok := brkTryRead(t, c); !ok || got != m {
			t.Fatalf("got %q (%t), want %q", got, ok, m)
		}
	}
	c.Close()
	c2, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	n.send("WATCHDOG=1")
	if got, ok := brkTryRead(t, c2); !ok || got != "WATCHDOG=1" {
		t.Fatalf("after the abstract socket was made anew: got %q (%t)", got, ok)
	}
}

// Concurrent senders share the one socket: no message arrives twice, a
// drop (the manager's queue was full) is logged, and what is held for
// later goes out with the next send the manager takes.
func TestBreakNotifierConcurrentSends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listenNotify(t, path)
	t.Setenv("NOTIFY_SOCKET", path)
	dropped := &countingHandler{}
	n := newNotifier(slog.New(dropped))
	n.send("READY=1")
	if got := readNotify(t, c); got != "READY=1" {
		t.Fatalf("got %q", got)
	}
	kept := n.fd
	const senders, each = 16, 40
	seen := map[string]int{}
	var smu sync.Mutex
	stop := make(chan struct{})
	reader := make(chan struct{})
	go func() { // the manager reads as fast as it can
		defer close(reader)
		for {
			m, ok := brkTryRead(t, c)
			if ok {
				smu.Lock()
				seen[m]++
				smu.Unlock()
				continue
			}
			select {
			case <-stop:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			for j := range each {
				n.send(fmt.Sprintf("STATUS=%d/%d", i, j))
			}
		})
	}
	wg.Wait()
	close(stop)
	<-reader
	for m, ok := brkTryRead(t, c); ok; m, ok = brkTryRead(t, c) {
		seen[m]++
	}
	arrived := 0
	for i := range senders {
		for j := range each {
			k := seen[fmt.Sprintf("STATUS=%d/%d", i, j)]
			if k > 1 {
				t.Errorf("STATUS=%d/%d arrived %d times", i, j, k)
			}
			arrived += k
		}
	}
	if arrived == 0 || (arrived < senders*each && dropped.n.Load() == 0) {
		t.Errorf("%d of %d messages arrived, and %d sends reported a drop", arrived, senders*each, dropped.n.Load())
	}
	// With the manager reading again, the next send leaves nothing held.
	n.send("WATCHDOG=1")
	for m, ok := brkTryRead(t, c); ok; m, ok = brkTryRead(t, c) {
		if seen[m]++; seen[m] > 1 && m != "WATCHDOG=1" {
			t.Errorf("%s arrived twice", m)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pending) != 0 {
		t.Errorf("still held after a send the manager took: %q", n.pending)
	}
	if n.fd != kept {
		t.Error("concurrent sends went out on a new socket")
	}
}

// countingHandler counts the records logged.
type countingHandler struct{ n atomic.Int32 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// Each time the manager closes its socket and binds a new one at the
// path, the very next WATCHDOG=1 reaches the new one.
func TestBreakNotifierEveryRecreationGetsTheNextPing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	t.Setenv("NOTIFY_SOCKET", path)
	n := newNotifier(slog.New(slog.DiscardHandler))
	for round := range 5 {
		c := listenNotify(t, path)
		for range 3 {
			n.send("WATCHDOG=1")
			if got, ok := brkTryRead(t, c); !ok || got != "WATCHDOG=1" {
				t.Fatalf("round %d: got %q (%t), want WATCHDOG=1", round, got, ok)
			}
		}
		c.Close()
	}
}

// The manager binds a new socket at NOTIFY_SOCKET while its old one is
// still open (unlinked, no longer read): every ping must reach the new
// socket, or systemd kills a healthy daemon. A socket kept connected to
// the old one had its writes succeed and lost every WATCHDOG=1.
func TestBreakNotifierRecreatedWhileOldStillOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	old := listenNotify(t, path)
	t.Setenv("NOTIFY_SOCKET", path)
	n := newNotifier(slog.New(slog.DiscardHandler))
	n.send("READY=1")
	if got, ok := brkTryRead(t, old); !ok || got != "READY=1" {
		t.Fatalf("got %q (%t)", got, ok)
	}
	c := listenNotify(t, path) // a new socket at the path; the old one stays open
	lost := 0
	for range 5 {
		n.send("WATCHDOG=1")
		if _, ok := brkTryRead(t, c); !ok {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of 5 WATCHDOG=1 never reached the socket at NOTIFY_SOCKET (they went to the manager's old socket)", lost)
	}
}

// brkBlockedIn reports whether some goroutine's stack holds every one of
// the frames given.
func brkBlockedIn(frames ...string) bool {
	b := make([]byte, 1<<20)
	b = b[:runtime.Stack(b, true)]
	for g := range strings.SplitSeq(string(b), "\n\n") {
		all := true
		for _, f := range frames {
			if !strings.Contains(g, f) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// send promises it never blocks on the manager ("datagrams to a full
// socket fail at once"). A manager that is slow to read (its queue of
// max_dgram_qlen datagrams is full) must cost a ping, not the caller:
// the watchdog's loop, the reconcile loop (STATUS=) and, behind the
// notifier's lock, every other sender.
func TestBreakNotifierFullQueueDoesNotBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listenNotify(t, path)
	t.Setenv("NOTIFY_SOCKET", path)
	n := newNotifier(slog.New(slog.DiscardHandler))
	n.send("READY=1")
	if got := readNotify(t, c); got != "READY=1" {
		t.Fatalf("got %q", got)
	}
	filled := fillNotify(t, path) // another client fills the manager's queue
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.send("WATCHDOG=1")
	}()
	// Either send returns, or its goroutine parks waiting for the socket
	// to become writable: no clock decides.
	blocked := false
wait:
	for {
		select {
		case <-done:
			break wait
		default:
		}
		if brkBlockedIn("(*notifier).send", "waitWrite") {
			blocked = true
			break
		}
		runtime.Gosched()
	}
	if blocked {
		// A second sender waits behind the first on the notifier's lock.
		second := make(chan struct{})
		go func() {
			defer close(second)
			n.send("STATUS=behind")
		}()
		for !brkBlockedIn("(*notifier).send", "sync.(*Mutex).Lock") {
			runtime.Gosched()
		}
		t.Errorf("send blocked on a manager whose queue is full (%d datagrams queued), and a second sender waits on its lock", filled)
		// Let both go: the manager reads its queue.
		for range filled + 2 {
			readNotify(t, c)
		}
		<-done
		<-second
	}
}
