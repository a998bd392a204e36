package main

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/control"
)

// TestMain runs main itself when the test binary is started as the
// launcher (LAUNCHER_TEST_PROGRAM names the program it execs).
func TestMain(m *testing.M) {
	if p := os.Getenv("LAUNCHER_TEST_PROGRAM"); p != "" {
		program = p
		socketPath = os.Getenv("LAUNCHER_TEST_SOCKET")
		os.Args = append([]string{"unitlease"}, strings.Fields(os.Getenv("LAUNCHER_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSocketIsTheDaemons(t *testing.T) {
	if socketPath != control.SocketPath {
		t.Fatalf("the launcher dials %s, the daemon listens on %s", socketPath, control.SocketPath)
	}
}

// guardService admits a.service and refuses the rest, and records the
// caller the socket saw.
type guardService struct {
	control.Service
	peers chan control.Peer
}

func (g guardService) Guard(ctx context.Context, unit string) error {
	if p, ok := control.PeerOf(ctx); ok {
		g.peers <- p
	}
	if unit == "a.service" {
		return nil
	}
	return errors.New("lease x is held by node-b, not by this node")
}

// serve runs the daemon's control server (the real one: its root-only
// listener, its HTTP handler) on a socket under a temporary directory.
func serve(t testing.TB) (string, chan control.Peer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	l, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	peers := make(chan control.Peer, 16)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = control.Serve(ctx, l, guardService{peers: peers})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return path, peers
}

// launch runs the test binary as the launcher with args; the program it
// execs for other commands is a script that prints its arguments.
func launch(t *testing.T, socket string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "program")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"program: $*\"\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "LAUNCHER_TEST_PROGRAM="+script, "LAUNCHER_TEST_SOCKET="+socket, "LAUNCHER_TEST_ARGS="+strings.Join(args, " "))
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// The guard goes to the daemon's real control server and admits or
// refuses as it answers, with its reason, the full program's message.
func TestGuardAsksTheDaemon(t *testing.T) {
	socket, peers := serve(t)
	if out, errOut, code := launch(t, socket, "guard", "a.service"); code != 0 || out != "" || errOut != "" {
		t.Fatalf("guard a.service: exit %d, stdout %q, stderr %q: want admitted, silent", code, out, errOut)
	}
	select {
	case p := <-peers:
		if p.PID <= 0 || p.UID != uint32(os.Getuid()) {
			t.Errorf("the daemon saw the caller as %+v", p)
		}
	default:
		t.Error("the daemon's guard was not asked")
	}
	_, errOut, code := launch(t, socket, "guard", "b.service")
	want := "unitlease guard: refusing to start b.service: lease x is held by node-b, not by this node\n"
	if code != 1 || errOut != want {
		t.Fatalf("guard b.service: exit %d, stderr %q; want 1, %q", code, errOut, want)
	}
	// A name the server refuses as too long is refused, not admitted.
	long := strings.Repeat("x", 300) + ".service"
	if _, errOut, code := launch(t, socket, "guard", long); code != 1 || !strings.Contains(errOut, "longer than any name") {
		t.Fatalf("guard of a 300-byte name: exit %d, stderr %q", code, errOut)
	}
}

func TestGuardWithoutDaemonRefuses(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "control.sock")
	_, errOut, code := launch(t, socket, "guard", "a.service")
	if code != 1 || !strings.HasPrefix(errOut, "unitlease guard: refusing to start a.service: no answer from the unitlease daemon (is unitlease.service running?): ") {
		t.Fatalf("guard with no daemon: exit %d, stderr %q", code, errOut)
	}
}

// A daemon that accepts the connection but never answers: the guard
// refuses once its deadline passes.
func TestGuardDeadline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	l, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			<-t.Context().Done()
			c.Close()
		}
	}()
	socketPath = path
	defer func() { socketPath = control.SocketPath }()
	// The read waits out what is left of the deadline, then refuses.
	if got, want := guard("a.service", time.Now().Add(100*time.Millisecond)), noAnswer+"read: connection timed out"; got != want {
		t.Fatalf("guard past its deadline: %q, want %q", got, want)
	}
	if err := guard("a.service", time.Now()); !strings.HasPrefix(err, noAnswer) {
		t.Fatalf("guard with its deadline passed: %q, want refused with no answer", err)
	}
}

// Every other command, and guard in any other form, goes to the full
// program, with the arguments as given and the exit code it returns.
func TestOtherCommandsExecTheProgram(t *testing.T) {
	for _, args := range [][]string{{"status", "--json"}, {"run"}, {"guard"}, {"guard", "--help"}, {"guard", "a.service", "b.service"}, {}} {
		out, errOut, code := launch(t, "/nonexistent", args...)
		if want := strings.TrimSpace("program: " + strings.Join(args, " ")); strings.TrimSpace(out) != want || code != 7 {
			t.Errorf("%q: stdout %q, exit %d, stderr %q; want %q, exit 7", args, out, code, errOut, want)
		}
	}
}

func TestAnswer(t *testing.T) {
	for _, c := range []struct {
		resp, want string // want "" admits
	}{
		{"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}\n", ""},
		{"HTTP/1.1 200 OK\r\n\r\n", ""},
		{"HTTP/1.0 403 Forbidden\r\nContent-Type: application/json\r\n\r\n{\"error\":\"not held here\"}\n", "not held here"},
		{"HTTP/1.0 500 Internal Server Error\r\n\r\nboom", "500 Internal Server Error"},
		{"HTTP/1.0 403 Forbidden\r\n\r\n{\"error\":\"\"}", "403 Forbidden"},
		{"HTTP/1.0 200 OK\r\n", "no answer from the unitlease daemon: not an HTTP reply"},
		{"", "no answer from the unitlease daemon: not an HTTP reply"},
		{"SSH-2.0 200\r\n\r\n", "no answer from the unitlease daemon: not an HTTP reply"},
		{"HTTP/1.0 20\r\n\r\n", "no answer from the unitlease daemon: not an HTTP reply"},
		{"HTTP/1.0 2000 OK\r\n\r\n", "no answer from the unitlease daemon: not an HTTP reply"},
	} {
		if got := answer([]byte(c.resp)); got != c.want {
			t.Errorf("answer(%q) = %q, want %q", c.resp, got, c.want)
		}
	}
}

// The daemon's server reads the escaped name back as the name, whatever
// its bytes (url.ParseQuery is what net/http's r.FormValue uses).
func TestQueryEscapeReadsBack(t *testing.T) {
	names := []string{"a.service", `ul-br@x\x2dy.service`, "a b+c&d=e%f#g?h", "ünï.service", "\x00\xff\n", ""}
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		q, err := url.ParseQuery("unit=" + queryEscape(n))
		if err != nil || q.Get("unit") != n {
			t.Fatalf("queryEscape(%q) = %q reads back as %q (%v)", n, queryEscape(n), q.Get("unit"), err)
		}
	}
}

// The reason the guard prints is the string the daemon's encoder wrote,
// as encoding/json reads it: quotes, backslashes, the HTML characters
// it escapes, control characters, invalid UTF-8, U+2028, surrogate pairs.
func TestErrorOfReadsTheEncoders(t *testing.T) {
	reasons := []string{"lease x is held by node-b, not by this node", `a "quoted" \path\`, "<a>&b", "tab\tnl\ncr\r\x00\x1f",
		"bad \xff\xfe utf-8", "line\u2028sep\u2029", "emoji 😀", "/slash/"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		b := make([]byte, 1+r.IntN(30))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		reasons = append(reasons, string(b))
	}
	for _, reason := range reasons {
		var body strings.Builder
		if err := json.NewEncoder(&body).Encode(struct {
			Error string `json:"error"`
		}{reason}); err != nil {
			t.Fatal(err)
		}
		var want struct{ Error string }
		if err := json.Unmarshal([]byte(body.String()), &want); err != nil {
			t.Fatal(err)
		}
		if got := errorOf(body.String()); got != want.Error {
			t.Errorf("errorOf(%q) = %q, want %q", body.String(), got, want.Error)
		}
	}
	// Hand-written escapes encoding/json reads too.
	for body, want := range map[string]string{
		`{"error":"\ud83d\ude00"}`:        "😀",
		`{"error":"\ud83d"}`:              "\ufffd",
		`{"error":"\ud83dx"}`:             "\ufffdx",
		`{"error":"\ud83d\u0041"}`:        "\ufffdA",
		`{"error":"\b\f\/"}`:              "\b\f/",
		` { "error" : "spaced" } ` + "\n": "spaced",
	} {
		var dec struct{ Error string }
		if err := json.Unmarshal([]byte(body), &dec); err != nil || dec.Error != want {
			t.Fatalf("the test's own %q: encoding/json reads %q (%v), want %q", body, dec.Error, err, want)
		}
		if got := errorOf(body); got != want {
			t.Errorf("errorOf(%q) = %q, want %q", body, got, want)
		}
	}
	// Anything else is no reason: the guard prints the status instead.
	for _, body := range []string{"", "boom", `{"error":"x"`, `{"error":"x"}{}`, `{"reason":"x"}`, `{"error":1}`,
		`{"error":"x","y":1}`, `{"error":"\x"}`, `{"error":"\u12"}`, "{\"error\":\"a\nb\"}", `["error","x"]`} {
		if got := errorOf(body); got != "" {
			t.Errorf("errorOf(%q) = %q, want none", body, got)
		}
	}
}

// The launcher links none of the packages that doubled its start.
func TestLauncherLinksLittle(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "net", "net/url", "encoding/json", "fmt", "reflect", "strings":
			t.Errorf("the launcher links %s", p)
		}
	}
}
