//go:build linux

package main

// Review tests that try to break the guard as the raw-syscall rewrite
// (edb5e10) wrote it. Where they can, they run the previous version
// (oldGuard, oldAnswer below: HEAD~1's code, copied) on the same server
// and require the new one to be at least as safe: never admit where the
// old one refused.
//
// No sleeps synchronise: where a test must know the guard is blocked in a
// system call (to split a reply across reads, or to interrupt a call with
// a signal), it runs guard on a goroutine locked to its own thread and
// reads that thread's /proc/self/task/TID/syscall and its count of
// voluntary context switches. The only sleeps are a poll's pace and the
// pace of a server that drips its reply.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/unitlease/unitlease/internal/control"
)

// ---------------------------------------------------------------------------
// The test binary as the launcher with exact arguments, and as the program
// it execs.
//
// main_test.go's TestMain takes the launcher's arguments from an
// environment variable split on spaces, so it cannot pass "", " a" or
// a name longer than an environment string may be. Here the arguments
// come from a file (each ends with a NUL), and the program the launcher
// execs is this binary again, printing the argv it got (hex, so that any
// byte survives) and exiting 7.

const (
	envArgsFile = "BREAK_LAUNCHER_ARGS_FILE"
	envSocket   = "BREAK_LAUNCHER_SOCKET"
	envDump     = "BREAK_LAUNCHER_DUMP_ARGV"
)

func init() {
	if os.Getenv(envDump) != "" {
		os.Stdout.WriteString("argv=" + encodeArgv(os.Args) + "\n")
		os.Exit(7)
	}
	file := os.Getenv(envArgsFile)
	if file == "" {
		return
	}
	data, err := os.ReadFile(file)
	if err != nil {
		panic(err)
	}
	args := []string{"unitlease"}
	for len(data) > 0 {
		i := bytes.IndexByte(data, 0)
		args = append(args, string(data[:i]))
		data = data[i+1:]
	}
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	program = self
	socketPath = os.Getenv(envSocket)
	os.Unsetenv(envArgsFile)
	os.Setenv(envDump, "1")
	os.Args = args
	main()
	os.Exit(0)
}

func encodeArgv(argv []string) string {
	hs := make([]string, len(argv))
	for i, a := range argv {
		hs[i] = "x" + hex.EncodeToString([]byte(a))
	}
	return strings.Join(hs, ",")
}

type launched struct {
	stdout, stderr string
	code           int            // -1 if killed by a signal
	signal         syscall.Signal // the signal that killed it
}

// launchExact runs the launcher with exactly args (after argv[0]); during,
// if set, runs beside it until it exits (its channel closes then).
func launchExact(t *testing.T, socket string, args []string, during func(p *os.Process, exited <-chan struct{})) launched {
	t.Helper()
	var enc []byte
	for _, a := range args {
		enc = append(append(enc, a...), 0)
	}
	file := filepath.Join(t.TempDir(), "args")
	if err := os.WriteFile(file, enc, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envArgsFile+"="+file, envSocket+"="+socket)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var wg sync.WaitGroup
	if during != nil {
		wg.Add(1)
		go func() { defer wg.Done(); during(cmd.Process, exited) }()
	}
	err := cmd.Wait()
	close(exited)
	wg.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	l := launched{stdout: out.String(), stderr: errOut.String(), code: cmd.ProcessState.ExitCode()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		l.signal = ws.Signal()
	}
	return l
}

// ---------------------------------------------------------------------------
// The previous version (HEAD~1), copied, to compare with.

func oldGuard(path, unit string, deadline time.Time) string {
	c, err := net.DialTimeout("unix", path, time.Until(deadline))
	if err != nil {
		return noAnswer + err.Error()
	}
	defer c.Close()
	if err := c.SetDeadline(deadline); err != nil {
		return err.Error()
	}
	req := "GET /guard?unit=" + url.QueryEscape(unit) + " HTTP/1.0\r\nHost: unitlease\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return noAnswer + err.Error()
	}
	resp, err := io.ReadAll(io.LimitReader(c, 64<<10))
	if err != nil {
		return noAnswer + err.Error()
	}
	if err := oldAnswer(resp); err != nil {
		return err.Error()
	}
	return ""
}

func oldAnswer(resp []byte) error {
	head, body, ok := strings.Cut(string(resp), "\r\n\r\n")
	status, _, _ := strings.Cut(head, "\r\n")
	proto, status, _ := strings.Cut(status, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") || len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return errors.New("no answer from the unitlease daemon: not an HTTP reply")
	}
	if status[:3] == "200" {
		return nil
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
		return errors.New(status)
	}
	return errors.New(e.Error)
}

// oldRoutesToGuard is HEAD~1's test of the command line (args after argv[0]).
func oldRoutesToGuard(args []string) bool {
	return len(args) == 2 && args[0] == "guard" && !strings.HasPrefix(args[1], "-")
}

// newGuard is guard on the socket at path.
func newGuard(path, unit string, deadline time.Time) string {
	saved := socketPath
	socketPath = path
	defer func() { socketPath = saved }()
	return guard(unit, deadline)
}

func useSocket(t *testing.T, path string) {
	saved := socketPath
	socketPath = path
	t.Cleanup(func() { socketPath = saved })
}

// ---------------------------------------------------------------------------
// Servers.

// fakeDaemon listens on a Unix socket under a temporary directory and runs
// serve for every connection, on its own goroutine; at the test's end it
// closes the listener and every connection, and waits for the handlers.
func fakeDaemon(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "control.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var handlers sync.WaitGroup
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			handlers.Add(1)
			go func() { defer handlers.Done(); defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-accepting
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		handlers.Wait()
	})
	return path
}

// readRequest reads the guard's request, to its blank line.
func readRequest(c net.Conn) (string, error) {
	var req []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(req, []byte("\r\n\r\n")) {
		n, err := c.Read(buf)
		req = append(req, buf[:n]...)
		if err != nil {
			return string(req), err
		}
	}
	return string(req), nil
}

// recordingService is the daemon's side of the real control server: it
// admits a.service only and records every unit it is asked about.
type recordingService struct {
	control.Service
	units chan string
}

func (s recordingService) Guard(ctx context.Context, unit string) error {
	s.units <- unit
	if unit == "a.service" {
		return nil
	}
	return errors.New("refused " + strconv.Quote(unit))
}

func realDaemon(t *testing.T) (string, chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	l, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	units := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = control.Serve(ctx, l, recordingService{units: units}) }()
	t.Cleanup(func() { cancel(); <-done })
	return path, units
}

// fullBacklog is a listening socket whose backlog is full (listen(fd, 0)
// and one connection waiting): a blocking connect to it waits. drain
// accepts what waits, so that a connect waiting can go on.
func fullBacklog(t *testing.T) (path string, drain func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "control.sock")
	sock := func(flags int) int {
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|flags, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	var fds []int
	t.Cleanup(func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	})
	l := sock(syscall.SOCK_NONBLOCK)
	fds = append(fds, l)
	if err := syscall.Bind(l, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(l, 0); err != nil {
		t.Fatal(err)
	}
	filler := sock(syscall.SOCK_NONBLOCK)
	fds = append(fds, filler)
	if err := syscall.Connect(filler, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatalf("the first connection: %v", err)
	}
	probe := sock(syscall.SOCK_NONBLOCK)
	err := syscall.Connect(probe, &syscall.SockaddrUnix{Name: path})
	syscall.Close(probe)
	if err != syscall.EAGAIN {
		t.Fatalf("a connect to the full backlog: %v, want EAGAIN", err)
	}
	return path, func() {
		for {
			fd, _, err := syscall.Accept(l)
			if err != nil {
				return
			}
			fds = append(fds, fd)
		}
	}
}

// ---------------------------------------------------------------------------
// The guard on a thread of its own, observed through /proc.

type thread int

// syscallNr is the system call the thread is blocked in, or -1.
func (th thread) syscallNr() int {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(int(th)) + "/syscall")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return -1
	}
	return n
}

// switches is the thread's count of voluntary context switches: it grows
// each time the thread blocks.
func (th thread) switches() int {
	b, _ := os.ReadFile("/proc/self/task/" + strconv.Itoa(int(th)) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}

func (th thread) signal(t *testing.T, sig syscall.Signal) {
	if err := syscall.Tgkill(os.Getpid(), int(th), sig); err != nil {
		t.Fatalf("tgkill: %v", err)
	}
}

type guardRun struct {
	tid  thread
	res  chan string
	out  string
	done bool
}

// startGuard runs guard on a goroutine locked to a thread (never
// unlocked: the thread ends with it).
func startGuard(unit string, deadline time.Time) *guardRun {
	g := &guardRun{res: make(chan string, 1)}
	tids := make(chan thread)
	go func() {
		runtime.LockOSThread()
		tids <- thread(syscall.Gettid())
		g.res <- guard(unit, deadline)
	}()
	g.tid = <-tids
	return g
}

// await polls until the guard has returned (true) or cond holds (false);
// cond nil waits for the guard.
func (g *guardRun) await(cond func() bool) bool {
	for {
		if g.done {
			return true
		}
		select {
		case g.out = <-g.res:
			g.done = true
			return true
		default:
		}
		if cond != nil && cond() {
			return false
		}
		time.Sleep(100 * time.Microsecond) // a poll's pace
	}
}

func (g *guardRun) blockedIn(nr int) func() bool {
	return func() bool { return g.tid.syscallNr() == nr }
}

// blockedAgainIn holds once the thread has blocked since it had switched
// c0 times, and is blocked in nr: it went round its loop and called nr again.
func (g *guardRun) blockedAgainIn(nr, c0 int) func() bool {
	return func() bool { return g.tid.syscallNr() == nr && g.tid.switches() > c0 }
}

// interrupt signals the guard's thread while it is blocked in nr, and
// reports whether it then called nr again (false: the guard returned).
func (g *guardRun) interrupt(t *testing.T, nr int, sig syscall.Signal) bool {
	if g.await(g.blockedIn(nr)) {
		return false
	}
	c0 := g.tid.switches()
	g.tid.signal(t, sig)
	return !g.await(g.blockedAgainIn(nr, c0))
}

// signalAcrossDeadline interrupts the guard's call nr again and again
// until its deadline has passed, then up to three more times, and
// returns how many of those three it answered by calling nr again: a
// guard bounded by its deadline answers none of them so (what is left of
// its deadline is nothing; it must refuse, not wait).
func signalAcrossDeadline(t *testing.T, g *guardRun, nr int, deadline time.Time) (late int) {
	for i := 0; time.Now().Before(deadline); i++ {
		sig := syscall.SIGWINCH
		if i%2 == 1 {
			sig = syscall.SIGCHLD
		}
		if !g.interrupt(t, nr, sig) {
			return 0
		}
	}
	for range 3 {
		if !g.interrupt(t, nr, syscall.SIGWINCH) {
			break
		}
		late++
	}
	return late
}

// ---------------------------------------------------------------------------
// Attacks on the reply, each run against the new guard and the old one.

type replyCase struct {
	name   string
	budget time.Duration // the guard's deadline from its start; 0: 10 s
	serve  func(c net.Conn, deadline time.Time)
	admit  bool
	reason string // a refusal's exact reason, if set (for both versions)
}

func answerWith(reply string) func(net.Conn, time.Time) {
	return func(c net.Conn, _ time.Time) {
		if _, err := readRequest(c); err == nil {
			c.Write([]byte(reply))
		}
	}
}

func answerBytewise(reply string) func(net.Conn, time.Time) {
	return func(c net.Conn, _ time.Time) {
		if _, err := readRequest(c); err != nil {
			return
		}
		for i := range len(reply) {
			if _, err := c.Write([]byte{reply[i]}); err != nil {
				return
			}
		}
	}
}

func TestBreakGuardReplies(t *testing.T) {
	const ok200 = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}\n"
	const refused = "HTTP/1.0 403 Forbidden\r\nContent-Type: application/json\r\n\r\n{\"error\":\"lease x is held by node-b\"}\n"
	const notHTTP = "no answer from the unitlease daemon: not an HTTP reply"
	pad := strings.Repeat("X-Pad: yyyyyyyyyyyyyyyyyyyyy\r\n", (70<<10)/30)
	cases := []replyCase{
		{name: "200", serve: answerWith(ok200), admit: true},
		{name: "200 one byte a write", serve: answerBytewise(ok200), admit: true},
		{name: "403 one byte a write", serve: answerBytewise(refused), reason: "lease x is held by node-b"},
		{name: "HTTP/1.1 200, no body", serve: answerWith("HTTP/1.1 200 OK\r\n\r\n"), admit: true},
		{name: "close before any byte", serve: answerWith(""), reason: notHTTP},
		{name: "close mid status line", serve: answerWith("HTTP/1.0 20"), reason: notHTTP},
		{name: "close mid header", serve: answerWith("HTTP/1.0 200 OK\r\nContent-Ty"), reason: notHTTP},
		{name: "close after the status line", serve: answerWith("HTTP/1.0 200 OK\r\n"), reason: notHTTP},
		{name: "close after CRLF CR", serve: answerWith("HTTP/1.0 200 OK\r\n\r"), reason: notHTTP},
		{name: "HTTP/1.0 200 and no blank line", serve: answerWith("HTTP/1.0 200"), reason: notHTTP},
		{name: "HTTP/1.0 200 OK and no blank line", serve: answerWith("HTTP/1.0 200 OK"), reason: notHTTP},
		{name: "HTTP/1.0 2000", serve: answerWith("HTTP/1.0 2000\r\n\r\n"), reason: notHTTP},
		{name: "HTTP/1.0 2000 OK", serve: answerWith("HTTP/1.0 2000 OK\r\n\r\n"), reason: notHTTP},
		{name: "HTTP/1.0 200OK", serve: answerWith("HTTP/1.0 200OK\r\n\r\n"), reason: notHTTP},
		{name: "HTTP/1.0 200<TAB>OK", serve: answerWith("HTTP/1.0 200\tOK\r\n\r\n"), reason: notHTTP},
		{name: "two spaces before 200", serve: answerWith("HTTP/1.0  200 OK\r\n\r\n"), reason: notHTTP},
		{name: "HTTP/2 200", serve: answerWith("HTTP/2 200\r\n\r\n"), reason: notHTTP},
		{name: "HTTP/1 200", serve: answerWith("HTTP/1 200 OK\r\n\r\n"), reason: notHTTP},
		{name: "lower-case http", serve: answerWith("http/1.0 200 OK\r\n\r\n"), reason: notHTTP},
		{name: "LF line ends", serve: answerWith("HTTP/1.0 200 OK\n\n"), reason: notHTTP},
		{name: "a CRLF before the status line", serve: answerWith("\r\nHTTP/1.0 200 OK\r\n\r\n"), reason: notHTTP},
		{name: "a NUL before the status line", serve: answerWith("\x00HTTP/1.0 200 OK\r\n\r\n"), reason: notHTTP},
		{name: "SSH banner", serve: answerWith("SSH-2.0-OpenSSH_9.6 200\r\n\r\n"), reason: notHTTP},
		{name: "100 Continue, then 200", serve: answerWith("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"), reason: "100 Continue"},
		{name: "403 without a body", serve: answerWith("HTTP/1.0 403 Forbidden\r\n\r\n"), reason: "403 Forbidden"},
		{name: "201", serve: answerWith("HTTP/1.0 201 Created\r\n\r\n"), reason: "201 Created"},
		{name: "204", serve: answerWith("HTTP/1.0 204 No Content\r\n\r\n"), reason: "204 No Content"},
		{name: "-200", serve: answerWith("HTTP/1.0 -200 OK\r\n\r\n"), reason: notHTTP},
		{name: "500 with an error body saying 200", serve: answerWith("HTTP/1.0 500 x\r\n\r\n{\"error\":\"HTTP/1.0 200 OK\"}"), reason: "HTTP/1.0 200 OK"},
		{name: "200's blank line past 64 KiB", serve: answerWith("HTTP/1.0 200 OK\r\n" + pad + "\r\n"), reason: notHTTP},
		{name: "403 with a 70 KiB body", serve: answerWith("HTTP/1.0 403 Forbidden\r\n\r\n" + pad), reason: "403 Forbidden"},
		{name: "200 then an endless body", serve: func(c net.Conn, _ time.Time) {
			// Both versions stop at 64 KiB and admit: the status line said 200.
			if _, err := readRequest(c); err != nil {
				return
			}
			chunk := []byte(ok200 + strings.Repeat("x", 8<<10))
			for {
				if _, err := c.Write(chunk); err != nil {
					return
				}
				chunk = bytes.Repeat([]byte("x"), 8<<10)
			}
		}, admit: true},
		{name: "200 without reading the request (reset)", serve: func(c net.Conn, _ time.Time) {
			// Closing with the request unread resets the connection.
			c.Write([]byte(ok200))
		}},
		{name: "never answers", budget: 150 * time.Millisecond, serve: func(c net.Conn, _ time.Time) {
			readRequest(c)
			io.Copy(io.Discard, c) // until the guard closes
		}},
		{name: "200 and never closes", budget: 150 * time.Millisecond, serve: func(c net.Conn, _ time.Time) {
			if _, err := readRequest(c); err == nil {
				c.Write([]byte(ok200))
				io.Copy(io.Discard, c)
			}
		}},
		{name: "200 dripped, complete only after the deadline", budget: 150 * time.Millisecond, serve: func(c net.Conn, deadline time.Time) {
			// A byte every 2 ms: each read gets one long before its
			// timeout, so only a bound on the total refuses.
			if _, err := readRequest(c); err != nil {
				return
			}
			drip := "HTTP/1.0 200 OK\r\nX-Drip: "
			for i := 0; ; i++ {
				b := byte('a')
				if i < len(drip) {
					b = drip[i]
				}
				if !time.Now().Before(deadline) && i >= len(drip) {
					break
				}
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(2 * time.Millisecond) // the drip's pace
			}
			c.Write([]byte("\r\n\r\n{}\n"))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var current atomic.Pointer[time.Time]
			path := fakeDaemon(t, func(conn net.Conn) { c.serve(conn, *current.Load()) })
			budget := c.budget
			if budget == 0 {
				budget = guardTimeout
			}
			var got [2]string
			for i, g := range []func(string, string, time.Time) string{newGuard, oldGuard} {
				deadline := time.Now().Add(budget)
				current.Store(&deadline)
				got[i] = g(path, "a.service", deadline)
			}
			t.Logf("new: %q; old: %q", got[0], got[1])
			switch {
			case c.admit && got[0] != "":
				t.Errorf("new guard refused: %q", got[0])
			case !c.admit && got[0] == "":
				t.Errorf("new guard ADMITTED")
			case c.reason != "" && got[0] != c.reason:
				t.Errorf("new guard: %q, want %q", got[0], c.reason)
			case c.reason == "" && !c.admit && !strings.HasPrefix(got[0], noAnswer):
				t.Errorf("new guard: %q, want a refusal for no answer", got[0])
			}
			if (got[0] == "") != (got[1] == "") {
				t.Errorf("the versions differ: new %q, old %q", got[0], got[1])
			}
			if c.reason != "" && got[1] != c.reason {
				t.Errorf("old guard: %q, want %q (the case is wrong)", got[1], c.reason)
			}
		})
	}
}

// Each byte of the reply in a read of its own: the server writes the next
// byte only once the guard's thread has blocked in read again.
func TestBreakGuardEachByteItsOwnRead(t *testing.T) {
	for _, c := range []struct{ reply, want string }{
		{"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}\n", ""},
		{"HTTP/1.0 403 Forbidden\r\n\r\n{\"error\":\"held \\u00e9lsewhere\"}\n", "held élsewhere"},
		{"HTTP/1.0 200 OK\r\n\r", "no answer from the unitlease daemon: not an HTTP reply"},
	} {
		path := filepath.Join(t.TempDir(), "control.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		useSocket(t, path)
		g := startGuard("a.service", time.Now().Add(guardTimeout))
		conn, err := l.Accept()
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := readRequest(conn); err != nil {
			t.Fatal(err)
		}
		for i := range len(c.reply) {
			if g.await(g.blockedIn(syscall.SYS_READ)) {
				t.Fatalf("%q: the guard returned %q after %d bytes", c.reply, g.out, i)
			}
			c0 := g.tid.switches()
			if _, err := conn.Write([]byte{c.reply[i]}); err != nil {
				t.Fatal(err)
			}
			if g.await(g.blockedAgainIn(syscall.SYS_READ, c0)) {
				t.Fatalf("%q: the guard returned %q after %d bytes", c.reply, g.out, i+1)
			}
		}
		conn.Close()
		g.await(nil)
		if g.out != c.want {
			t.Errorf("%q a byte a read: %q, want %q", c.reply, g.out, c.want)
		}
	}
}

// ---------------------------------------------------------------------------
// Sockets that are not the daemon's.

func TestBreakGuardSocketPaths(t *testing.T) {
	dir := t.TempDir()
	mk := map[string]func(p string) error{
		"missing":       func(string) error { return nil },
		"regular file":  func(p string) error { return os.WriteFile(p, []byte("HTTP/1.0 200 OK\r\n\r\n"), 0o600) },
		"directory":     func(p string) error { return os.Mkdir(p, 0o700) },
		"fifo":          func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"dangling link": func(p string) error { return os.Symlink(filepath.Join(dir, "nothing"), p) },
		"link to a dir": func(p string) error { return os.Symlink(dir, p) },
		"datagram socket": func(p string) error {
			c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
			if err == nil {
				t.Cleanup(func() { c.Close() })
			}
			return err
		},
		"seqpacket listener": func(p string) error {
			l, err := net.Listen("unixpacket", p)
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		},
		"bound, not listening": func(p string) error {
			fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			t.Cleanup(func() { syscall.Close(fd) })
			return syscall.Bind(fd, &syscall.SockaddrUnix{Name: p})
		},
		"stale socket": func(p string) error {
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
			if err != nil {
				return err
			}
			l.SetUnlinkOnClose(false)
			return l.Close()
		},
	}
	paths := map[string]string{
		"too long": filepath.Join(dir, strings.Repeat("s", 120)),
		"empty":    "",
	}
	for name, f := range mk {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := f(p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		paths[name] = p
	}
	for name, p := range paths {
		deadline := time.Now().Add(2 * time.Second)
		got, old := newGuard(p, "a.service", deadline), oldGuard(p, "a.service", deadline)
		t.Logf("%s: new %q; old %q", name, got, old)
		if !strings.HasPrefix(got, noAnswer+"connect "+p+": ") {
			t.Errorf("%s: new guard %q, want refused with no answer", name, got)
		}
		if old == "" {
			t.Errorf("%s: the old guard admitted", name)
		}
	}
}

// A listener whose backlog is full: connect waits, at most until the
// deadline, then refuses. (The old version's non-blocking connect
// refused at once with EAGAIN.)
func TestBreakGuardConnectBacklogFull(t *testing.T) {
	path, _ := fullBacklog(t)
	useSocket(t, path)
	g := startGuard("a.service", time.Now().Add(200*time.Millisecond))
	if g.await(g.blockedIn(syscall.SYS_CONNECT)) {
		t.Logf("the guard returned %q before it was seen waiting in connect", g.out)
	}
	g.await(nil)
	if want := noAnswer + "connect " + path + ": connection timed out"; g.out != want {
		t.Errorf("guard to a full backlog: %q, want %q", g.out, want)
	}
	if old := oldGuard(path, "a.service", time.Now().Add(200*time.Millisecond)); old == "" {
		t.Errorf("the old guard admitted")
	}
}

// ---------------------------------------------------------------------------
// Signals: a blocking socket call with SO_SNDTIMEO or SO_RCVTIMEO set
// fails with EINTR when a signal handler runs (signal(7): never restarted,
// SA_RESTART or not), and Go's runtime has a handler for every signal. The
// guard calls again; each call must be bounded by what is left of the
// deadline, not by the timeout it set before the first.

// connect is called again after EINTR; each call sets SO_SNDTIMEO to
// what is left of the deadline, since the kernel (unix_stream_connect)
// starts the timeout afresh on every call. With the timeout set once
// before the first call (the code before), signals coming faster than it
// kept a guard waiting on a full backlog for good.
func TestBreakGuardSignalsDuringConnect(t *testing.T) {
	path, drain := fullBacklog(t)
	useSocket(t, path)
	deadline := time.Now().Add(300 * time.Millisecond)
	g := startGuard("a.service", deadline)
	late := signalAcrossDeadline(t, g, syscall.SYS_CONNECT, deadline)
	if late > 0 {
		t.Errorf("after its deadline had passed, the guard called connect again %d times out of %d signals (it waits a new full timeout each time)", late, late)
		// Evidence only (no assertion): keep signalling for a second past
		// the deadline, then stop and see when the guard gives up.
		more := 0
		for time.Since(deadline) < time.Second && g.interrupt(t, syscall.SYS_CONNECT, syscall.SIGWINCH) {
			more++
		}
		stopped := time.Since(deadline)
		g.await(nil)
		t.Logf("it called connect %d more times in the %v after its deadline; once the signals stopped it returned %v after its deadline: %q",
			more, stopped.Round(time.Millisecond), time.Since(deadline).Round(time.Millisecond), g.out)
		drain()
	}
	g.await(nil)
	if g.out == "" || !strings.HasPrefix(g.out, noAnswer) {
		t.Errorf("guard: %q, want refused with no answer", g.out)
	}
}

func TestBreakGuardSignalsDuringRead(t *testing.T) {
	path := fakeDaemon(t, func(c net.Conn) {
		readRequest(c)
		io.Copy(io.Discard, c)
	})
	useSocket(t, path)
	deadline := time.Now().Add(300 * time.Millisecond)
	g := startGuard("a.service", deadline)
	if late := signalAcrossDeadline(t, g, syscall.SYS_READ, deadline); late > 0 {
		t.Errorf("after its deadline, the guard read again %d times", late)
	}
	g.await(nil)
	if !strings.HasPrefix(g.out, noAnswer) {
		t.Errorf("guard: %q, want refused with no answer", g.out)
	}
}

func TestBreakGuardSignalsDuringWrite(t *testing.T) {
	// The daemon never reads: a request of 3 MiB fills the socket's buffer.
	hold := make(chan struct{})
	path := fakeDaemon(t, func(c net.Conn) { <-hold })
	defer close(hold)
	useSocket(t, path)
	deadline := time.Now().Add(300 * time.Millisecond)
	g := startGuard(strings.Repeat("%", 1<<20), deadline)
	if late := signalAcrossDeadline(t, g, syscall.SYS_WRITE, deadline); late > 0 {
		t.Errorf("after its deadline, the guard wrote again %d times", late)
	}
	g.await(nil)
	if !strings.HasPrefix(g.out, noAnswer) {
		t.Errorf("guard: %q, want refused with no answer", g.out)
	}
}

// The launcher itself under a storm of SIGCHLD and SIGWINCH, against the
// daemon's real server: admitted or refused as the daemon answers, exit 0
// or 1, never killed.
func TestBreakLauncherUnderSignals(t *testing.T) {
	path, units := realDaemon(t)
	storm := func(p *os.Process, exited <-chan struct{}) {
		for i := 0; ; i++ {
			select {
			case <-exited:
				return
			default:
			}
			sig := syscall.SIGCHLD
			if i%2 == 1 {
				sig = syscall.SIGWINCH
			}
			p.Signal(sig)
			time.Sleep(50 * time.Microsecond) // the storm's pace
		}
	}
	for range 3 {
		l := launchExact(t, path, []string{"guard", "a.service"}, storm)
		if l.code != 0 || l.stderr != "" || l.stdout != "" {
			t.Errorf("guard a.service under signals: %+v, want admitted", l)
		}
		if u := <-units; u != "a.service" {
			t.Errorf("the daemon was asked about %q", u)
		}
		l = launchExact(t, path, []string{"guard", "b.service"}, storm)
		if want := "unitlease guard: refusing to start b.service: refused \"b.service\"\n"; l.code != 1 || l.stderr != want {
			t.Errorf("guard b.service under signals: %+v, want exit 1, %q", l, want)
		}
		<-units
	}
}

// A daemon that closes while the guard is still writing: EPIPE, and
// SIGPIPE, which must not kill the launcher (Go ignores it on sockets).
func TestBreakLauncherBrokenPipe(t *testing.T) {
	path := fakeDaemon(t, func(c net.Conn) { c.Read(make([]byte, 1)) })
	unit := strings.Repeat("%", 200<<10) // 600 KiB escaped: more than the socket buffers hold
	l := launchExact(t, path, []string{"guard", unit}, nil)
	prefix := "unitlease guard: refusing to start " + unit + ": " + noAnswer
	if l.signal != 0 || l.code != 1 || !strings.HasPrefix(l.stderr, prefix) {
		t.Fatalf("guard to a daemon that hangs up: exit %d, signal %v, stderr %.300q", l.code, l.signal, strings.TrimPrefix(l.stderr, prefix))
	}
	t.Logf("reason: %q", strings.TrimPrefix(l.stderr, prefix))
}

// ---------------------------------------------------------------------------
// The command line: which go to the guard, which to the full program, and
// the program gets its arguments unchanged.

func TestBreakLauncherRouting(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{
		{"guard", ""}, {"guard", "-"}, {"guard", "--"}, {"guard", "-a.service"}, {"guard", "--help"},
		{"guard", " -a.service"}, {"guard", "\t-a"}, {"guard", "a.service"}, {"guard", "a b.service"},
		{"guard", "\xff\xfe.service"}, {"guard", "a\n-b"}, {"guard", "%"}, {"guard", "+"},
		{"guard", "a.service", ""}, {"guard", "", ""}, {"guard", "--", "a.service"},
		{"Guard", "a.service"}, {"guard ", "a.service"}, {" guard", "a.service"}, {"", "guard"},
		{"guard"}, {""}, {}, {"run", "--", "-x", "", "\xff"}, {"status", "--json"},
	} {
		l := launchExact(t, socket, args, nil)
		if oldRoutesToGuard(args) {
			want := "unitlease guard: refusing to start " + args[1] + ": " + noAnswer + "connect " + socket + ": no such file or directory\n"
			oldWant := fmt.Sprintln("unitlease guard: refusing to start", args[1]+":",
				errors.New(noAnswer+"connect "+socket+": no such file or directory"))
			if want != oldWant {
				t.Fatalf("the test's messages differ: %q %q", want, oldWant)
			}
			if l.code != 1 || l.stdout != "" || l.stderr != want {
				t.Errorf("%q: %+v; want the guard's refusal %q", args, l, want)
			}
			continue
		}
		if want := "argv=" + encodeArgv(append([]string{"unitlease"}, args...)) + "\n"; l.code != 7 || l.stdout != want {
			t.Errorf("%q: %+v; want the program run with the same argv (%q), exit 7", args, l, want)
		}
	}
}

// The empty name is the guard's, as it was (HEAD~1: !strings.HasPrefix("",
// "-")), and the daemon's answer is printed.
func TestBreakLauncherEmptyName(t *testing.T) {
	path, units := realDaemon(t)
	l := launchExact(t, path, []string{"guard", ""}, nil)
	if want := "unitlease guard: refusing to start : refused \"\"\n"; l.code != 1 || l.stderr != want {
		t.Errorf("guard \"\": %+v, want %q", l, want)
	}
	if u := <-units; u != "" {
		t.Errorf("the daemon was asked about %q", u)
	}
}

// ---------------------------------------------------------------------------
// Unit names: the daemon's real server reads each back exactly, and admits
// only the one it admits.

func breakNames() []string {
	names := []string{
		"a.service", "", "%", "%25", "%zz", "%2", "+", "a+b.service", "a b.service", " ", "\t", "\r\n",
		"\xff\xfe\xfd", "\x80", "\x01", "\x7f", "-a.service", "--help", "-",
		"a.service\r\nHost: evil", "a.service HTTP/1.1\r\n\r\nGET /guard?unit=a.service", "b&unit=a.service",
		"a.service&unit=b", "unit=a.service", "a.service#frag", "a.service?x", "a;service", "ünï.service",
		"a%2Eservice", "a%2eservice", "a.service%00", "A.SERVICE", "a.service ", " a.service", "a.service/",
		"../a.service", "a.service\xff", "\xef\xbb\xbfa.service", strings.Repeat("%", 256), strings.Repeat("\xff", 256),
	}
	for c := range 256 {
		names = append(names, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+".service")
	}
	return names
}

func TestBreakGuardUnitNamesReadBack(t *testing.T) {
	path, units := realDaemon(t)
	useSocket(t, path)
	for _, n := range breakNames() {
		got := guard(n, time.Now().Add(guardTimeout))
		asked := <-units
		if asked != n {
			t.Errorf("guard(%q): the daemon was asked about %q", n, asked)
		}
		if (got == "") != (n == "a.service") {
			t.Errorf("guard(%q) = %q", n, got)
		}
		if n != "a.service" && got != "refused "+strconv.Quote(n) {
			t.Errorf("guard(%q) = %q, want the daemon's reason", n, got)
		}
	}
	// Longer than any name: the daemon refuses (400, or 431 for a request
	// line longer than its headers may be) without asking.
	for _, n := range []string{strings.Repeat("x", 257), strings.Repeat("%", 257), strings.Repeat("\xff", 4096)} {
		got := guard(n, time.Now().Add(guardTimeout))
		if got == "" {
			t.Errorf("guard of %d bytes admitted", len(n))
		}
		t.Logf("guard of %d bytes: %q", len(n), got)
	}
	select {
	case u := <-units:
		t.Errorf("the daemon was asked about a name of %d bytes", len(u))
	default:
	}
}

// The request line the guard sends: its target only unreserved bytes and
// %XX, read back (as net/http reads it) as the name, the same as the old
// version's (url.QueryEscape, which writes ' ' as '+').
func TestBreakGuardRequestLine(t *testing.T) {
	lines := make(chan string, 1)
	path := fakeDaemon(t, func(c net.Conn) {
		req, _ := readRequest(c)
		lines <- req
	})
	for _, n := range breakNames() {
		newGuard(path, n, time.Now().Add(guardTimeout))
		req := <-lines
		oldGuard(path, n, time.Now().Add(guardTimeout))
		oldReq := <-lines
		line, rest, _ := strings.Cut(req, "\r\n")
		if rest != "Host: unitlease\r\n\r\n" {
			t.Errorf("%q: headers %q", n, rest)
		}
		target, ok := strings.CutPrefix(line, "GET /guard?unit=")
		target, ok2 := strings.CutSuffix(target, " HTTP/1.0")
		if !ok || !ok2 {
			t.Errorf("%q: request line %q", n, line)
			continue
		}
		for i := 0; i < len(target); i++ {
			if c := target[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~%", c) >= 0) {
				t.Errorf("%q: byte %q in the target %q", n, c, target)
			}
		}
		q, err := url.ParseQuery("unit=" + target)
		oldLine, _, _ := strings.Cut(oldReq, "\r\n")
		oldQ, oldErr := url.ParseQuery(strings.TrimSuffix(strings.TrimPrefix(oldLine, "GET /guard?"), " HTTP/1.0"))
		if err != nil || oldErr != nil || q.Get("unit") != n || oldQ.Get("unit") != n || len(q) != 1 || len(q["unit"]) != 1 {
			t.Errorf("%q: target %q reads back as %q (%v); the old one's %q as %q (%v)", n, target, q, err, oldLine, oldQ, oldErr)
		}
	}
}

// ---------------------------------------------------------------------------
// The deadline.

func TestBreakGuardDeadlinePassed(t *testing.T) {
	var conns atomic.Int32
	path := fakeDaemon(t, func(c net.Conn) { conns.Add(1); answerWith("HTTP/1.0 200 OK\r\n\r\n")(c, time.Time{}) })
	useSocket(t, path)
	for _, d := range []time.Time{{}, time.Now(), time.Now().Add(-time.Nanosecond), time.Now().Add(-time.Hour)} {
		if got := guard("a.service", d); !strings.HasPrefix(got, noAnswer) || !strings.HasSuffix(got, "connection timed out") {
			t.Errorf("guard with deadline %v: %q", d, got)
		}
	}
	// Without the server having been asked: the check is before connect.
	if got := guard("a.service", time.Now().Add(guardTimeout)); got != "" {
		t.Fatalf("guard with time left: %q", got)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the server saw %d connections, want only the last guard's", n)
	}
}

// ---------------------------------------------------------------------------
// answer and errorOf against HEAD~1's answer (strings.Cut, encoding/json).

// Random responses from pieces of status lines: the two versions admit the
// same ones, and say the same otherwise.
func TestBreakAnswerAgainstOld(t *testing.T) {
	pieces := []string{"HTTP/1.0", "HTTP/1.1", "HTTP/1.", "HTTP/1", "HTTP/2", "http/1.0", " ", " ", "200", "2000", "20", "403",
		"OK", "\r\n", "\r\n", "\r", "\n", "\r\n\r\n", "\r\n\r\n", "x", "\x00", "\t", `{"error":"e"}`, `{"error":""}`, "{", "}", `"`}
	starts := []string{"HTTP/1.0 200", "HTTP/1.1 200 OK", "HTTP/1.0 403", "HTTP/1.x 200", "HTTP/1.0 2000", "HTTP/1.0 200 OK\r\n"}
	r := rand.New(rand.NewPCG(7, 8))
	admitted := 0
	for range 50000 {
		var b strings.Builder
		if r.IntN(2) == 0 {
			b.WriteString(starts[r.IntN(len(starts))])
		}
		for range 1 + r.IntN(6) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		resp := b.String()
		got := answer([]byte(resp))
		old := ""
		if err := oldAnswer([]byte(resp)); err != nil {
			old = err.Error()
		}
		if got != old {
			t.Errorf("answer(%q) = %q; the old one: %q", resp, got, old)
		}
		if got == "" {
			admitted++
			if !strings.HasPrefix(resp, "HTTP/1.") || !strings.Contains(resp, "\r\n\r\n") {
				t.Errorf("answer(%q) admits", resp)
			}
		}
	}
	t.Logf("%d of 50000 admitted", admitted)
}

func oldReason(body string) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(body), &e) != nil {
		return ""
	}
	return e.Error
}

// Bodies encoding/json reads otherwise than errorOf. None of them changes
// whether the guard admits (a status other than 200 refuses whatever the
// body); they change only the reason printed. The daemon's encoder writes
// none of them.
func TestBreakErrorOfAgainstEncodingJSON(t *testing.T) {
	for _, c := range []struct{ body, note string }{
		{`{"ERROR":"x"}`, "encoding/json matches a field's name without regard to case"},
		{`{"Error":"x"}`, "encoding/json matches a field's name without regard to case"},
		{`{"error":"x","error":"y"}`, "encoding/json keeps the last of duplicate members"},
		{`{"error":"x","code":1}`, "encoding/json ignores unknown members"},
		{`{"code":1,"error":"x"}`, "encoding/json ignores unknown members"},
		{`{"error":null}`, "null"},
		{"{\"error\":\"bad \xff byte\"}", "encoding/json reads invalid UTF-8 as U+FFFD, errorOf copies the byte"},
		{"{\"error\":\"\xed\xa0\x80\"}", "a raw surrogate (invalid UTF-8)"},
		{"\xef\xbb\xbf{\"error\":\"bom\"}", "a byte order mark: neither reads it"},
		{`{"error":"x"}` + "\x00", "a NUL after the object: neither"},
		{`{"error":"x"} {"error":"y"}`, "two objects: neither"},
		{`{"error":"a\u0000b"}`, "an escaped NUL: both"},
		{`{"error":"\u001b[31mred"}`, "an escaped ESC: both (the old one printed it too)"},
		{`{"\u0065rror":"escaped key"}`, "an escaped key: both"},
		{`{"error":"\ud800\udc00\udbff\udfff"}`, "surrogate pairs: both"},
		{`{"error":"\uDFFF\uD800"}`, "lone surrogates, reversed: both U+FFFD U+FFFD"},
		{`{"error":"\ud800\ud800\udc00"}`, "a lone high surrogate before a pair"},
		{`{"error":"\u+123"}`, "a sign in \\u: neither"},
		{`{"error":"\u_123"}`, "an underscore in \\u: neither"},
		{`{"error":"x"` + strings.Repeat(" ", 100) + "}", "whitespace"},
		{`{"error":"` + strings.Repeat("y", 70<<10) + `"}`, "a long reason"},
	} {
		got, old := errorOf(c.body), oldReason(c.body)
		status := "403 Forbidden"
		resp := "HTTP/1.0 " + status + "\r\n\r\n" + c.body
		if answer([]byte(resp)) == "" {
			t.Errorf("%.60q: admitted", c.body)
		}
		if got != old {
			t.Logf("differs (%s): errorOf %.40q, encoding/json %.40q", c.note, got, old)
		}
	}
	// Random near-JSON bodies: whatever errorOf reads from a body of valid
	// UTF-8, encoding/json reads the same.
	pieces := []string{"{", "}", `"error"`, `"Error"`, `"err"`, ":", ",", " ", "\n", `"x"`, `"\u00e9"`, `"\ud800"`, `"\udc00"`,
		`"\ud83d\ude00"`, `\`, `"`, "null", "1", `"a\"b"`, `"\/"`, "[", "]", `"\u12"`, `"\x"`, "\t", "é", "\u2028", `\u0041`, `\n`}
	mutations := []byte("{}[]\":,\\ \t\nu0123456789abcdefABCDEF/xé\x00\x1f\x7f")
	r := rand.New(rand.NewPCG(9, 10))
	gaps, read := 0, 0
	for i := range 60000 {
		var body string
		switch i % 3 {
		case 0: // pieces
			var b strings.Builder
			for range 1 + r.IntN(8) {
				b.WriteString(pieces[r.IntN(len(pieces))])
			}
			body = b.String()
		case 1: // pieces as the value
			var b strings.Builder
			for range 1 + r.IntN(4) {
				b.WriteString(pieces[r.IntN(len(pieces))])
			}
			body = `{"error":` + b.String() + "}"
		case 2: // what the daemon's encoder writes, a few bytes changed
			reason := make([]byte, r.IntN(12))
			for j := range reason {
				reason[j] = byte(r.IntN(128))
			}
			enc, _ := json.Marshal(struct {
				Error string `json:"error"`
			}{string(reason)})
			b := append([]byte(nil), enc...)
			for range 1 + r.IntN(3) {
				j := r.IntN(len(b) + 1)
				switch c := mutations[r.IntN(len(mutations))]; r.IntN(3) {
				case 0:
					b = append(b[:j], append([]byte{c}, b[j:]...)...)
				case 1:
					if j < len(b) {
						b = append(b[:j], b[j+1:]...)
					}
				default:
					if j < len(b) {
						b[j] = c
					}
				}
			}
			body = string(b)
		}
		got, old := errorOf(body), oldReason(body)
		if got != "" {
			read++
		}
		if got != "" && utf8.ValidString(body) && got != old {
			t.Errorf("errorOf(%q) = %q; encoding/json reads %q", body, got, old)
		}
		if got == "" && old != "" {
			if gaps++; gaps <= 5 {
				t.Logf("encoding/json reads %q from %q, errorOf nothing", old, body)
			}
		}
	}
	t.Logf("of 60000 random bodies errorOf read a reason from %d; encoding/json read one from %d more (the status is printed instead)", read, gaps)
}
