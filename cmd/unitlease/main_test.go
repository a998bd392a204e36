package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/daemon"
)

// runCmd runs the command line args and returns its exit code and output.
func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// useSocket points the commands at path for the rest of the test.
func useSocket(t *testing.T, path string) {
	old := socketPath
	socketPath = path
	t.Cleanup(func() { socketPath = old })
}

// socketDir is a fresh directory whose socket paths fit in sun_path.
func socketDir(t *testing.T) string {
	dir := t.TempDir()
	if len(dir) <= 80 {
		return dir
	}
	dir, err := os.MkdirTemp("/tmp", "unitlease-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestArgs(t *testing.T) {
	// Anything that gets past argument handling fails with exit code 1, not
	// 2: there is no daemon on this socket and no file at this config path.
	dir := t.TempDir()
	useSocket(t, filepath.Join(dir, "no-daemon.sock"))
	missing := filepath.Join(dir, "missing.toml")
	oldVersion := daemon.Version
	daemon.Version = "1.2.3-test"
	t.Cleanup(func() { daemon.Version = oldVersion })

	const guardUsage = "usage: unitlease guard UNIT\n"
	const handoffUsage = "usage: unitlease handoff LEASE|UNIT [--to NODE]\n"
	const resetUsage = "usage: unitlease reset [--config FILE] LEASE\n"
	const clearUsage = "usage: unitlease clear [--config FILE] [--stop-failed] LEASE\n"
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		stdout    string
		stderr    string // exact, unless stderrHas is set
		stderrHas []string
	}{
		{name: "no arguments", args: nil, code: 2, stderr: usage},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2,
			stderr: "unitlease: unknown command \"frobnicate\"\n" + usage},
		{name: "version", args: []string{"version"}, code: 0, stdout: "unitlease 1.2.3-test\n"},
		{name: "status extra argument", args: []string{"status", "web"}, code: 2},
		{name: "status --json extra argument", args: []string{"status", "--json", "web"}, code: 2},
		{name: "status unknown flag", args: []string{"status", "--bogus"}, code: 2,
			stderrHas: []string{"flag provided but not defined: -bogus", "usage: unitlease status [--json] [-w]\n", "-json"}},
		{name: "guard no unit", args: []string{"guard"}, code: 2, stderr: guardUsage},
		{name: "guard two units", args: []string{"guard", "a.service", "b.service"}, code: 2, stderr: guardUsage},
		{name: "handoff no target", args: []string{"handoff"}, code: 2, stderr: handoffUsage},
		{name: "handoff two targets", args: []string{"handoff", "web", "db"}, code: 2, stderr: handoffUsage},
		{name: "run stray argument", args: []string{"run", "--config", missing, "extra"}, code: 2},
		{name: "run unknown flag", args: []string{"run", "--bogus"}, code: 2,
			stderrHas: []string{"flag provided but not defined: -bogus", "usage: unitlease run [--config FILE]\n"}},
		{name: "reset no lease", args: []string{"reset", "--config", missing}, code: 2, stderr: resetUsage},
		{name: "reset two leases", args: []string{"reset", "--config", missing, "web", "db"}, code: 2, stderr: resetUsage},
		{name: "reset a name no lease has", args: []string{"reset", "--config", missing, "web\x1b[2J"}, code: 2,
			stderrHas: []string{`unitlease reset: lease "web\x1b[2J" contains '\x1b'; a lease name may use letters, digits and :-_.@\`}},
		{name: "clear an empty name", args: []string{"clear", "--config", missing, ""}, code: 2,
			stderrHas: []string{`unitlease clear: lease "" is empty`}},
		{name: "clear no lease", args: []string{"clear", "--config", missing}, code: 2, stderr: clearUsage},
		{name: "help", args: []string{"help"}, code: 0, stdout: usage},
		{name: "--help", args: []string{"--help"}, code: 0, stdout: usage},
		{name: "-h", args: []string{"-h"}, code: 0, stdout: usage},
		{name: "help handoff", args: []string{"help", "handoff"}, code: 0, stdout: handoffUsage + mustLookup("handoff").help + "\n"},
		{name: "handoff --help", args: []string{"handoff", "--help"}, code: 0, stdout: handoffUsage + mustLookup("handoff").help + "\n"},
		{name: "status -h", args: []string{"status", "-h"}, code: 0, stdout: "usage: unitlease status [--json] [-w]\n" + mustLookup("status").help + "\n"},
		{name: "reset --help after its lease", args: []string{"reset", "web", "--help"}, code: 0, stdout: resetUsage + mustLookup("reset").help + "\n"},
		{name: "help of nothing", args: []string{"help", "frobnicate"}, code: 2,
			stderr: "unitlease help: unknown command \"frobnicate\"\n" + usage},
		{name: "clear two leases", args: []string{"clear", "--config", missing, "web", "db"}, code: 2, stderr: clearUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tc.code, stderr)
			}
			if stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout, tc.stdout)
			}
			if tc.stderrHas == nil {
				if stderr != tc.stderr {
					t.Errorf("stderr %q, want %q", stderr, tc.stderr)
				}
				return
			}
			for _, s := range tc.stderrHas {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr %q lacks %q", stderr, s)
				}
			}
		})
	}
}

// fakeService is a strict control.Service: it answers only what the test
// set up and fails the test on any other call. It records the calls.
type fakeService struct {
	t        *testing.T
	snapshot *control.Snapshot        // nil: Snapshot is unexpected
	handoff  map[string]handoffAnswer // by target, or "target to node"
	guard    map[string]error         // by unit; nil admits
	drain    *control.DrainResult     // nil: Drain and Undrain are unexpected

	mu    sync.Mutex
	calls []string
}

type handoffAnswer struct {
	res control.HandoffResult
	err error
}

func (f *fakeService) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

// wantCalls fails the test unless the calls so far are want.
func (f *fakeService) wantCalls(want ...string) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !reflect.DeepEqual(f.calls, want) {
		f.t.Errorf("service calls %q, want %q", f.calls, want)
	}
}

func (f *fakeService) Snapshot(context.Context) control.Snapshot {
	f.record("Snapshot")
	if f.snapshot == nil {
		f.t.Errorf("unexpected Snapshot")
		return control.Snapshot{}
	}
	return *f.snapshot
}

func (f *fakeService) Drain(_ context.Context, stop bool) (control.DrainResult, error) {
	f.record(fmt.Sprint("Drain stop=", stop))
	if f.drain == nil {
		f.t.Errorf("unexpected Drain")
		return control.DrainResult{}, errors.New("unexpected drain")
	}
	return *f.drain, nil
}

func (f *fakeService) Undrain(context.Context) (control.DrainResult, error) {
	f.record("Undrain")
	if f.drain == nil {
		f.t.Errorf("unexpected Undrain")
		return control.DrainResult{}, errors.New("unexpected undrain")
	}
	return control.DrainResult{Node: f.drain.Node}, nil
}

func (f *fakeService) Handoff(_ context.Context, target, to string) (control.HandoffResult, error) {
	if to != "" {
		target += " to " + to
	}
	f.record("Handoff " + target)
	a, ok := f.handoff[target]
	if !ok {
		f.t.Errorf("unexpected Handoff(%q)", target)
		return control.HandoffResult{}, errors.New("unexpected handoff")
	}
	return a.res, a.err
}

func (f *fakeService) Guard(_ context.Context, unit string) error {
	f.record("Guard " + unit)
	err, ok := f.guard[unit]
	if !ok {
		f.t.Errorf("unexpected Guard(%q)", unit)
		return errors.New("unexpected guard")
	}
	return err
}

// serve serves svc on a socket in a temporary directory and points the
// commands at it. The socket accepts connections once serve returns; the
// server stops when the test ends.
func serve(t *testing.T, svc control.Service) {
	path := filepath.Join(socketDir(t), "control.sock")
	l, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var serveErr error
	stopped := make(chan struct{})
	go func() {
		serveErr = control.Serve(ctx, l, svc)
		close(stopped)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		if serveErr != nil {
			t.Errorf("control.Serve: %v", serveErr)
		}
	})
	useSocket(t, path)
}

func TestStatus(t *testing.T) {
	snap := fixtureSnapshot()
	f := &fakeService{t: t, snapshot: &snap}
	serve(t, f)
	code, stdout, stderr := runCmd("status")
	if code != 0 || stderr != "" {
		t.Fatalf("status: exit code %d, stderr %q", code, stderr)
	}
	if stdout != fixtureTable {
		t.Errorf("status printed:\n%s\nwant:\n%s", stdout, fixtureTable)
	}
	f.wantCalls("Snapshot")
}

func TestStatusJSON(t *testing.T) {
	snap := fixtureSnapshot()
	f := &fakeService{t: t, snapshot: &snap}
	serve(t, f)
	code, stdout, stderr := runCmd("status", "--json")
	if code != 0 || stderr != "" {
		t.Fatalf("status --json: exit code %d, stderr %q", code, stderr)
	}
	if want := "{\n  \"schema\": 0,\n  \"node\": \"node-a\",\n"; !strings.HasPrefix(stdout, want) {
		t.Errorf("status --json printed %q, want it indented, beginning %q", stdout, want)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var got control.Snapshot
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("status --json printed what does not decode: %v\n%s", err, stdout)
	}
	if dec.More() {
		t.Errorf("status --json printed more than one value:\n%s", stdout)
	}
	if !reflect.DeepEqual(got, snap) {
		t.Errorf("status --json decodes to\n%+v\nwant\n%+v", got, snap)
	}
	f.wantCalls("Snapshot")
}

func TestGuard(t *testing.T) {
	t.Run("admitted", func(t *testing.T) {
		f := &fakeService{t: t, guard: map[string]error{"nginx.service": nil}}
		serve(t, f)
		code, stdout, stderr := runCmd("guard", "nginx.service")
		if code != 0 || stdout != "" || stderr != "" {
			t.Errorf("guard: exit code %d, stdout %q, stderr %q; want 0 and no output", code, stdout, stderr)
		}
		f.wantCalls("Guard nginx.service")
	})
	t.Run("refused", func(t *testing.T) {
		f := &fakeService{t: t, guard: map[string]error{
			"nginx.service": errors.New("lease web is held by node-b"),
		}}
		serve(t, f)
		code, stdout, stderr := runCmd("guard", "nginx.service")
		if code != 1 {
			t.Errorf("guard: exit code %d, want 1", code)
		}
		if stdout != "" {
			t.Errorf("guard: stdout %q, want none", stdout)
		}
		if want := "unitlease guard: refusing to start nginx.service: lease web is held by node-b\n"; stderr != want {
			t.Errorf("guard: stderr %q, want %q", stderr, want)
		}
		f.wantCalls("Guard nginx.service")
	})
}

func TestHandoff(t *testing.T) {
	t.Run("taken", func(t *testing.T) {
		f := &fakeService{t: t, handoff: map[string]handoffAnswer{
			"web": {res: control.HandoffResult{Lease: "web", Holder: "node-b", Version: 8}},
		}}
		serve(t, f)
		code, stdout, stderr := runCmd("handoff", "web")
		if code != 0 || stderr != "" {
			t.Errorf("handoff: exit code %d, stderr %q; want 0 and none", code, stderr)
		}
		if want := "lease web is now held by node-b (version 8)\n"; stdout != want {
			t.Errorf("handoff: stdout %q, want %q", stdout, want)
		}
		f.wantCalls("Handoff web")
	})
	t.Run("failed", func(t *testing.T) {
		f := &fakeService{t: t, handoff: map[string]handoffAnswer{
			"web": {err: errors.New("no peer took lease web within 30s; it is running here again")},
		}}
		serve(t, f)
		code, stdout, stderr := runCmd("handoff", "web")
		if code != 1 {
			t.Errorf("handoff: exit code %d, want 1", code)
		}
		if stdout != "" {
			t.Errorf("handoff: stdout %q, want none", stdout)
		}
		if want := "unitlease handoff: no peer took lease web within 30s; it is running here again\n"; stderr != want {
			t.Errorf("handoff: stderr %q, want %q", stderr, want)
		}
		f.wantCalls("Handoff web")
	})
}

// TestHandoffTo: --to names the node before or after the lease, and
// reaches the daemon as given.
func TestHandoffTo(t *testing.T) {
	for _, args := range [][]string{{"web", "--to", "node-c"}, {"--to", "node-c", "web"}, {"web", "--to=node-c"}} {
		f := &fakeService{t: t, handoff: map[string]handoffAnswer{
			"web to node-c": {res: control.HandoffResult{Lease: "web", Holder: "node-c", Version: 9}},
		}}
		serve(t, f)
		code, stdout, stderr := runCmd(append([]string{"handoff"}, args...)...)
		if code != 0 || stderr != "" || stdout != "lease web is now held by node-c (version 9)\n" {
			t.Errorf("handoff %q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
		f.wantCalls("Handoff web to node-c")
	}
	for _, args := range [][]string{{"web", "db", "--to", "node-c"}, {"--to", "node-c"}, {"web", "--to"}} {
		f := &fakeService{t: t}
		serve(t, f)
		if code, _, stderr := runCmd(append([]string{"handoff"}, args...)...); code != 2 || !strings.Contains(stderr, "usage: unitlease handoff") {
			t.Errorf("handoff %q: exit %d, stderr %q; want 2 and the synopsis", args, code, stderr)
		}
		f.wantCalls()
	}
}

// TestDrain: drain prints each lease's fate and exits 1 while the node
// still holds a lease; undrain says the node takes leases again.
func TestDrain(t *testing.T) {
	f := &fakeService{t: t, drain: &control.DrainResult{Node: "node-a", Drained: true, Leases: []control.DrainOutcome{
		{Lease: "db", Outcome: control.DrainHandedOff, Holder: "node-b"},
		{Lease: "web", Outcome: control.DrainLeftRunning, Msg: "no other node announces itself ready to take it"},
	}}}
	serve(t, f)
	code, stdout, stderr := runCmd("drain")
	want := "node node-a is drained: it takes no lease until `unitlease undrain`\n" +
		"  db: handed off to node-b\n" +
		"  web: left running: no other node announces itself ready to take it\n"
	if code != 1 || stdout != want || stderr != "" {
		t.Errorf("drain: exit %d, stdout %q, stderr %q; want 1 and %q", code, stdout, stderr, want)
	}
	f.drain.Leases = f.drain.Leases[:1]
	if code, _, _ := runCmd("drain", "--stop"); code != 0 {
		t.Errorf("drain --stop with every lease handed off: exit %d, want 0", code)
	}
	if code, stdout, _ := runCmd("undrain"); code != 0 || stdout != "node node-a takes leases again\n" {
		t.Errorf("undrain: exit %d, stdout %q", code, stdout)
	}
	f.wantCalls("Drain stop=false", "Drain stop=true", "Undrain")
	if code, _, _ := runCmd("drain", "extra"); code != 2 {
		t.Errorf("drain extra: exit %d, want 2", code)
	}
}

func TestNoDaemon(t *testing.T) {
	useSocket(t, filepath.Join(socketDir(t), "control.sock"))
	const noAnswer = "no answer from the unitlease daemon (is unitlease.service running?): "
	for _, tc := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"status"}, "unitlease status: " + noAnswer},
		{[]string{"status", "--json"}, "unitlease status: " + noAnswer},
		{[]string{"guard", "nginx.service"}, "unitlease guard: refusing to start nginx.service: " + noAnswer},
		{[]string{"handoff", "web"}, "unitlease handoff: " + noAnswer},
		{[]string{"drain"}, "unitlease drain: " + noAnswer},
		{[]string{"undrain"}, "unitlease undrain: " + noAnswer},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(tc.args...)
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want none", stdout)
			}
			if !strings.HasPrefix(stderr, tc.prefix) {
				t.Errorf("stderr %q, want it to begin %q", stderr, tc.prefix)
			}
		})
	}
}

// TestEveryCommandAnswersHelp: `unitlease COMMAND --help` and `-h` print
// the command's synopsis and help on stdout and exit 0, for every command.
func TestEveryCommandAnswersHelp(t *testing.T) {
	for _, c := range commands {
		for _, flag := range []string{"--help", "-h"} {
			code, stdout, stderr := runCmd(c.name, flag)
			if code != 0 || !strings.HasPrefix(stdout, c.synopsis()+"\n") || strings.TrimSpace(c.help) == "" || stderr != "" {
				t.Errorf("unitlease %s %s: exit %d, stdout %q, stderr %q", c.name, flag, code, stdout, stderr)
			}
		}
	}
}

// TestBashCompletionKnowsEveryCommand: the packaged bash completion
// offers exactly the commands unitlease has.
func TestBashCompletionKnowsEveryCommand(t *testing.T) {
	data, err := os.ReadFile("../../packaging/unitlease.bash-completion")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), `local commands="`)
	list, _, _ := strings.Cut(rest, `"`)
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	if !ok || list != strings.Join(names, " ") {
		t.Fatalf("the completion offers %q, unitlease has %q", list, strings.Join(names, " "))
	}
}
