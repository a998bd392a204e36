package main

import (
	"context"
	"errors"
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
func serve(t *testing.T) (string, chan control.Peer) {
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
	err = guard("a.service", time.Now().Add(100*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "no answer from the unitlease daemon") {
		t.Fatalf("guard past its deadline: %v, want refused with no answer", err)
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
		err := answer([]byte(c.resp))
		if got := ""; err != nil {
			got = err.Error()
			if got != c.want {
				t.Errorf("answer(%q) = %q, want %q", c.resp, got, c.want)
			}
		} else if c.want != "" {
			t.Errorf("answer(%q) admits, want %q", c.resp, c.want)
		}
	}
}
