package daemon

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// listenNotify makes a notify socket at path, as systemd does.
func listenNotify(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	os.Remove(path)
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

// One socket carries every message, and a manager that made its socket
// anew gets the next message.
func TestNotifierKeepsItsSocketAndRedialsANewOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	first := listenNotify(t, path)
	t.Setenv("NOTIFY_SOCKET", path)
	n := newNotifier(slog.New(slog.DiscardHandler))

	n.send("READY=1")
	if got := readNotify(t, first); got != "READY=1" {
		t.Fatalf("got %q, want READY=1", got)
	}
	kept := n.fd
	n.send("WATCHDOG=1")
	if got := readNotify(t, first); got != "WATCHDOG=1" {
		t.Fatalf("got %q, want WATCHDOG=1", got)
	}
	if n.fd != kept {
		t.Fatal("the second message went out on a new socket")
	}

	first.Close()
	second := listenNotify(t, path)
	n.send("STATUS=again")
	if got := readNotify(t, second); got != "STATUS=again" {
		t.Fatalf("after the socket was made anew: got %q, want STATUS=again", got)
	}
}

// Without NOTIFY_SOCKET nothing is sent and nothing fails.
func TestNotifierWithoutSocketSendsNothing(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n := newNotifier(slog.New(slog.DiscardHandler))
	n.send("READY=1")
	if n.fd != -1 {
		t.Fatal("a socket was opened without NOTIFY_SOCKET")
	}
}

// With no manager listening, a message is dropped, and the next one
// reaches the manager once it listens.
func TestNotifierDropsAMessageNobodyTakes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	t.Setenv("NOTIFY_SOCKET", path)
	n := newNotifier(slog.New(slog.DiscardHandler))
	n.send("WATCHDOG=1") // nobody listens yet: dropped
	c := listenNotify(t, path)
	n.send("WATCHDOG=1")
	if got := readNotify(t, c); got != "WATCHDOG=1" {
		t.Fatalf("got %q, want WATCHDOG=1", got)
	}
}

// fillNotify fills the manager's queue from another client and returns
// how many datagrams it took.
func fillNotify(t *testing.T, path string) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for n := 0; ; n++ {
		if err := unix.Sendto(fd, []byte("STATUS=filler"), 0, &unix.SockaddrUnix{Name: path}); err != nil {
			if err != unix.EAGAIN {
				t.Fatal(err)
			}
			return n
		}
	}
}

// A READY=1 the manager had no room for goes out before the next
// message; of the STATUS= dropped, only the latest; a ping, never again.
func TestNotifierResendsWhatSystemdWaitsFor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listenNotify(t, path)
	t.Setenv("NOTIFY_SOCKET", path)
	n := newNotifier(slog.New(slog.DiscardHandler))
	filled := fillNotify(t, path)
	for _, m := range []string{"STATUS=starting", "WATCHDOG=1", "READY=1", "STATUS=leader: 3 units", "WATCHDOG=1"} {
		n.send(m) // each dropped: the queue is full
	}
	for range filled {
		if got := readNotify(t, c); got != "STATUS=filler" {
			t.Fatalf("got %q before the filler was read", got)
		}
	}
	n.send("WATCHDOG=1")
	var got []string // a datagram sent is queued at once: no waiting
	for m, ok := brkTryRead(t, c); ok; m, ok = brkTryRead(t, c) {
		got = append(got, m)
	}
	want := []string{"READY=1", "STATUS=leader: 3 units", "WATCHDOG=1"}
	if !slices.Equal(got, want) {
		t.Fatalf("after the queue emptied: got %q, want %q", got, want)
	}
	n.send("STATUS=again")
	if m, _ := brkTryRead(t, c); m != "STATUS=again" {
		t.Fatalf("got %q, want STATUS=again: a message sent was sent again", m)
	}
}
