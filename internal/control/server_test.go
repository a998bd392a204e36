package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

type fakeService struct{ guardCtx context.Context }

func (f *fakeService) Snapshot(context.Context) Snapshot { return Snapshot{Node: "n"} }
func (f *fakeService) Handoff(_ context.Context, target, to string) (HandoffResult, error) {
	if to != "" {
		target += " to " + to
	}
	return HandoffResult{}, errors.New("refused: " + target)
}
func (f *fakeService) Drain(_ context.Context, stop bool) (DrainResult, error) {
	return DrainResult{Node: "n", Drained: true, Leases: []DrainOutcome{{Lease: "l", Outcome: DrainLeftRunning, Msg: fmt.Sprint("stop=", stop)}}}, nil
}
func (f *fakeService) Undrain(context.Context) (DrainResult, error) {
	return DrainResult{Node: "n"}, nil
}
func (f *fakeService) Guard(ctx context.Context, unit string) error {
	f.guardCtx = ctx
	return nil
}

// serveAt starts the server on a socket under dir.
func serveAt(t *testing.T, path string, svc Service) {
	t.Helper()
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		_ = Serve(ctx, l, svc)
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func client(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

// TestTheCallerIsKnown: every request carries the caller's pid and uid,
// from the kernel; the guard learns who asks.
func TestTheCallerIsKnown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	f := &fakeService{}
	serveAt(t, path, f)
	if err := Dial(path).Guard(t.Context(), "x.service"); err != nil {
		t.Fatal(err)
	}
	p, ok := PeerOf(f.guardCtx)
	if !ok || p.PID != int32(os.Getpid()) || int(p.UID) != os.Geteuid() {
		t.Fatalf("peer %+v %t, want pid %d uid %d", p, ok, os.Getpid(), os.Geteuid())
	}
}

// TestLongNamesAreRefusedUnechoed: a name longer than any unit or lease
// name is refused without being echoed, and a header of a MiB is refused.
func TestLongNamesAreRefusedUnechoed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	serveAt(t, path, &fakeService{})
	long := strings.Repeat("x", 1<<20)
	resp, err := client(path).Post("http://unitlease/handoff?target="+long, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || len(body) > 1000 || strings.Contains(string(body), "xxxxxxxxxx") {
		t.Fatalf("a 1 MiB target: %d, %d bytes back", resp.StatusCode, len(body))
	}
	req, _ := http.NewRequest("GET", "http://unitlease/status", nil)
	req.Header.Set("X-Big", strings.Repeat("y", 1<<20))
	resp, err = client(path).Do(req)
	if err == nil {
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || strings.Contains(string(body), "yyyyyyyyyy") {
			t.Fatalf("a 1 MiB header: %d %q", resp.StatusCode, body[:min(len(body), 100)])
		}
	}
	if _, err := Dial(path).Handoff(t.Context(), "db", ""); err == nil || err.Error() != "refused: db" {
		t.Fatalf("a normal request after them: %v", err)
	}
}

// TestHandoffToAndDrainCrossTheSocket: the node a handoff names and the
// drain's stop reach the service as given, and the drain's outcome comes
// back whole.
func TestHandoffToAndDrainCrossTheSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	serveAt(t, path, &fakeService{})
	if _, err := Dial(path).Handoff(t.Context(), "db", "node-c"); err == nil || err.Error() != "refused: db to node-c" {
		t.Fatalf("handoff --to: %v", err)
	}
	for _, stop := range []bool{false, true} {
		res, err := Dial(path).Drain(t.Context(), stop)
		want := DrainResult{Node: "n", Drained: true, Leases: []DrainOutcome{{Lease: "l", Outcome: DrainLeftRunning, Msg: fmt.Sprint("stop=", stop)}}}
		if err != nil || !reflect.DeepEqual(res, want) {
			t.Fatalf("drain(stop=%t): %+v, %v; want %+v", stop, res, err, want)
		}
	}
	if res, err := Dial(path).Undrain(t.Context()); err != nil || res.Drained || res.Node != "n" {
		t.Fatalf("undrain: %+v, %v", res, err)
	}
}

// TestTheDirectoryIsRootsOnly: Listen tightens an existing directory to
// 0700 and refuses one another user owns.
func TestTheDirectoryIsRootsOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(filepath.Join(dir, "control.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %04o, want 0700", st.Mode().Perm())
	}
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(filepath.Join(dir, "control.sock")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534, not root") {
		t.Fatalf("a directory nobody owns: %v", err)
	}
}

// TestOnlyRootMayConnect: a process of another user that reaches the
// socket (here: one made reachable on purpose) is dropped unanswered.
func TestOnlyRootMayConnect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	if os.Getenv("CONTROL_TEST_CLIENT") != "" {
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "run", "control.sock")
	serveAt(t, path, &fakeService{})
	// Open the way for the test: the directory and the socket to all.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestClientAsAnotherUser$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CONTROL_TEST_CLIENT="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dropped:") {
		t.Fatalf("the client as uid 65534: %v\n%s", err, out)
	}
}

// TestClientAsAnotherUser is the client TestOnlyRootMayConnect runs as
// another user.
func TestClientAsAnotherUser(t *testing.T) {
	path := os.Getenv("CONTROL_TEST_CLIENT")
	if path == "" {
		t.Skip("run by TestOnlyRootMayConnect")
	}
	_, err := Dial(path).Status(t.Context())
	if err == nil {
		t.Fatal("answered a client of uid 65534")
	}
	fmt.Println("dropped:", err)
}

func TestInCgroup(t *testing.T) {
	const cg = "/system.slice/db.service"
	for _, c := range []struct {
		text, cg string
		want     bool
	}{
		{"0::/system.slice/db.service\n", cg, true},
		{"12:memory:/x\n1:name=systemd:/system.slice/db.service\n0::/\n", cg, true},
		{"0::/system.slice/db.service/control\n", cg, true},
		{"0::/system.slice/_io.service\n", "/system.slice/_io.service", true},
		{"0::/system.slice/b.service\n", cg, false},
		{"0::/system.slice/db.service2\n", cg, false},
		{"0::/user.slice/user-0.slice/user@0.service/app.slice/db.service\n", cg, false},
		{"0::/system.slice/docker.service/db.service\n", cg, false},
		{"0::/machine.slice/m.scope/system.slice/db.service\n", cg, false},
		{"12:memory:/system.slice/db.service\n0::/\n", cg, false},
		{"0::/\n", "/", false},
		{"0::/x\n", "", false},
	} {
		if got := inCgroup(c.text, c.cg); got != c.want {
			t.Errorf("%q in %q: %t", c.cg, c.text, got)
		}
	}
}

// TestInUnitCgroup: the guard's check that needs no call to systemd
// admits only a cgroup systemd's system manager makes for the unit
// (slices, then the unit), and leaves every other case to the check
// against the ControlGroup systemd reports.
func TestInUnitCgroup(t *testing.T) {
	for _, c := range []struct {
		text, unit string
		want       bool
	}{
		{"0::/system.slice/db.service\n", "db.service", true},
		{"0::/app.slice/app-db.slice/db.service\n", "db.service", true},
		{"12:memory:/x\n1:name=systemd:/system.slice/db.service\n0::/\n", "db.service", true},
		// A sub-cgroup of a unit with Delegate=: systemd decides.
		{"0::/system.slice/db.service/control\n", "db.service", false},
		// Escaped names: /system.slice/_io.service is io.service's.
		{"0::/system.slice/_io.service\n", "_io.service", false},
		{"0::/system.slice/__backup.service\n", "_backup.service", false},
		{"0::/system.slice/.hidden.service\n", ".hidden.service", false},
		// Top level, no slice: any root process can make it.
		{"0::/db.service\n", "db.service", false},
		{"0::/.slice/db.service\n", "db.service", false},
		{"0::/system.slice/db.service2\n", "db.service", false},
		{"0::/system.slice/xdb.service\n", "db.service", false},
		{"0::/user.slice/user-0.slice/user@0.service/app.slice/db.service\n", "db.service", false},
		{"0::/system.slice/docker.service/db.service\n", "db.service", false},
		{"0::/machine.slice/machine-c1.scope/payload/system.slice/db.service\n", "db.service", false},
		{"5:name=mine:/system.slice/db.service\n0::/user.slice/user-0.slice/session-3.scope\n", "db.service", false},
		{"4:memory:/system.slice/db.service\n0::/user.slice/user-0.slice/session-3.scope\n", "db.service", false},
		{"0::/system.slice/db.service\n", "", false},
		{"0::/system.slice/a/b.service\n", "a/b.service", false},
	} {
		if got := inUnitCgroup(c.text, c.unit); got != c.want {
			t.Errorf("%s in %q: %t, want %t", c.unit, c.text, got, c.want)
		}
	}
}
