//go:build linux

package vmtests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// unitctlInNode selects the tests and benchmarks of package unitctl that
// need systemd as PID 1; outside a node they skip themselves.
const (
	unitctlTests   = "^TestNode"
	unitctlBenches = "^BenchmarkNode"
	unitctlBin     = "/usr/local/bin/unitctl.test"
)

// TestUnitctlInNode builds the unitctl test binary, copies it into a node
// and runs its in-node tests and benchmark there (UNITLEASE_IN_NODE=1). It
// fails if any of them fails, is skipped, or does not report at all.
func TestUnitctlInNode(t *testing.T) {
	n := cluster.Node(0)
	ctx := t.Context()
	bin := filepath.Join(t.TempDir(), "unitctl.test")
	start := time.Now()
	if err := buildTestBinary(ctx, "../unitctl", bin); err != nil {
		t.Fatal(err)
	}
	if err := n.CopyIn(ctx, bin, unitctlBin, 0o755); err != nil {
		t.Fatal(err)
	}
	defer n.Run(context.WithoutCancel(ctx), "rm", "-f", unitctlBin)
	t.Logf("test binary built and copied in %v", time.Since(start).Round(time.Millisecond))

	want := strings.Fields(run(t, n, unitctlBin, "-test.list", unitctlTests+"|"+unitctlBenches))
	if len(want) == 0 {
		t.Fatal("the unitctl test binary lists no in-node tests")
	}
	out, _, err := n.Run(ctx, "env", "UNITLEASE_IN_NODE=1", unitctlBin, "-test.v", "-test.count=1", "-test.timeout=5m",
		"-test.run", unitctlTests, "-test.bench", unitctlBenches, "-test.benchtime=1x")
	problems := checkVerbose(out, want)
	if err != nil || len(problems) > 0 {
		t.Logf("in-node output:\n%s", out)
		t.Errorf("in-node run: %v", err)
	} else {
		t.Logf("in-node results:\n%s", summary(out))
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// summary keeps the verdicts and the benchmark's table of -test.v output.
func summary(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--- ") || strings.HasPrefix(line, "Benchmark") || strings.HasPrefix(line, "        ") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// buildTestBinary is `go test -c` with CGO_ENABLED=0: a static test
// binary that runs in any node.
func buildTestBinary(ctx context.Context, pkg, out string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building %s needs the go command on PATH: %w", pkg, err)
	}
	cmd := exec.CommandContext(ctx, goTool, "test", "-c", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go test -c %s: %w\n%s", pkg, err, b)
	}
	return nil
}

var (
	verdictLine = regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	benchLine   = regexp.MustCompile(`(?m)^(Benchmark\S+?)(-\d+)?\s+\d+\s+\d+(\.\d+)? ns/op`)
)

// checkVerbose reads `-test.v` output: every name in want (top-level tests
// and benchmarks) must have passed, and nothing at all (subtests too) may
// have failed or been skipped.
func checkVerbose(out string, want []string) []string {
	passed := map[string]bool{}
	var problems []string
	for _, m := range verdictLine.FindAllStringSubmatch(out, -1) {
		switch m[1] {
		case "PASS":
			passed[m[2]] = true
		default:
			problems = append(problems, fmt.Sprintf("%s: %s", m[2], m[1]))
		}
	}
	for _, m := range benchLine.FindAllStringSubmatch(out, -1) {
		passed[m[1]] = true
	}
	for _, name := range want {
		if !passed[name] {
			problems = append(problems, name+": no PASS reported")
		}
	}
	return problems
}

func TestCheckVerbose(t *testing.T) {
	out := `=== RUN   TestNodeA
--- PASS: TestNodeA (0.01s)
    --- SKIP: TestNodeA/sub (0.00s)
--- FAIL: TestNodeB (1.00s)
BenchmarkNodeC-2   	       1	1859155152 ns/op	        14.70 startunit-ms
`
	got := checkVerbose(out, []string{"TestNodeA", "TestNodeB", "BenchmarkNodeC", "TestNodeD"})
	want := []string{"TestNodeA/sub: SKIP", "TestNodeB: FAIL", "TestNodeB: no PASS reported", "TestNodeD: no PASS reported"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("checkVerbose:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
