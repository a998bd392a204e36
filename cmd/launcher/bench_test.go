package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkGuardProcess runs the guard as systemd does at every start of
// a managed unit: the launcher built as the packages build it, a process
// of its own, asking the daemon's real control server, which admits the
// unit. It reports the process's CPU (user and system) per run, beside a
// Go program that does nothing and /bin/true: what a start pays for the
// guard, and what no Go program and no process at all can go below.
//
//	go test -run '^$' -bench GuardProcess ./cmd/launcher
func BenchmarkGuardProcess(b *testing.B) {
	dir := b.TempDir()
	socket, peers := serve(b)
	go func() { // the server notes each caller; nobody here reads them
		for {
			select {
			case <-peers:
			case <-b.Context().Done():
				return
			}
		}
	}()
	launcher := filepath.Join(dir, "unitlease")
	nothing := filepath.Join(dir, "nothing")
	if err := os.WriteFile(filepath.Join(dir, "nothing.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, c := range [][]string{
		{"build", "-trimpath", "-ldflags", "-s -w -X main.socketPath=" + socket, "-o", launcher, "."},
		{"build", "-trimpath", "-ldflags", "-s -w", "-o", nothing, filepath.Join(dir, "nothing.go")},
	} {
		cmd := exec.Command("go", c...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go %v: %v\n%s", c, err, out)
		}
	}
	for _, p := range []struct {
		name string
		argv []string
	}{
		{"guard", []string{launcher, "guard", "a.service"}},
		{"go-nothing", []string{nothing}},
		{"bin-true", []string{"/bin/true"}},
	} {
		b.Run(p.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				cmd := exec.Command(p.argv[0], p.argv[1:]...)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %v: %s", p.argv, err, out)
				}
				cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/run")
		})
	}
}
