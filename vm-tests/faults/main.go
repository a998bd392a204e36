//go:build linux

// Command faults runs the end-to-end fault scenarios of unitlease as the
// .deb installs it: three container nodes, a real Redis on the host that
// each node reaches through a proxy of its own, and the exclusion witness
// as the managed unit. Each scenario is repeated; for every run it checks
// the witness for overlapping copies, that exactly one copy runs at the
// end, and measures the time with no copy running against its bound. It
// prints a table, writes the runs as JSON and exits 1 if any run fails.
//
//	go run ./vm-tests/faults [-runs 3] [-profile fast|default] [-json FILE] [-only REGEX] [-crash-under-advisory]
//
// Run it as root from the repository's root (`make vm-test`).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	vmtests "github.com/unitlease/unitlease/vm-tests"
)

func main() {
	runs := flag.Int("runs", 3, "repetitions of each scenario")
	prof := flag.String("profile", "fast", "timing profile: fast (tests) or default (the daemon's defaults)")
	jsonPath := flag.String("json", "", "write the runs here as JSON (default: a new file in the temporary directory)")
	only := flag.String("only", "", "run only the scenarios whose name matches this regular expression")
	list := flag.Bool("list", false, "list the scenarios and exit")
	flag.BoolVar(&underAdvisory, "crash-under-advisory", false,
		"report a crash failover of the fast profile that is not under 3 s without failing the run")
	flag.Parse()
	if *list {
		for _, sc := range scenarios {
			fmt.Printf("%-16s %s\n", sc.name, sc.desc)
		}
		return
	}
	p, ok := profiles[*prof]
	if !ok {
		fmt.Fprintf(os.Stderr, "faults: unknown profile %q (fast or default)\n", *prof)
		os.Exit(2)
	}
	re, err := regexp.Compile(*only)
	if err != nil || *runs < 1 {
		fmt.Fprintln(os.Stderr, "faults: bad -only or -runs:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err = run(ctx, p, *runs, re, *jsonPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// Report is the JSON file.
type Report struct {
	Profile   string        `json:"profile"`
	Timing    string        `json:"timing"`
	DropIn    string        `json:"unitlease_service_drop_in,omitempty"`
	LeaseSpan time.Duration `json:"lease_span_ns"`
	Package   string        `json:"package"`
	Runs      int           `json:"runs_per_scenario"`
	Took      time.Duration `json:"took_ns"`
	Scenarios []Scenario    `json:"scenarios"`
	Pass      bool          `json:"pass"`
}

func run(ctx context.Context, p profile, runs int, only *regexp.Regexp, jsonPath string) (bool, error) {
	began := time.Now()
	if err := vmtests.CheckHost(); err != nil {
		return false, err
	}
	if jsonPath == "" {
		f, err := os.CreateTemp("", "unitlease-vm-test-*.json")
		if err != nil {
			return false, err
		}
		f.Close()
		jsonPath = f.Name()
	}
	tmp, err := os.MkdirTemp("", "unitlease-faults-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	logf("building the package and the witness")
	deb, err := buildPackage(ctx, filepath.Join(tmp, "dist"))
	if err != nil {
		return false, err
	}
	witness := filepath.Join(tmp, "witness")
	if err := vmtests.BuildStatic(ctx, "./vm-tests/testdata/witness", witness); err != nil {
		return false, err
	}
	shared := filepath.Join(tmp, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		return false, err
	}
	logf("booting three nodes")
	c, err := vmtests.NewCluster(ctx, vmtests.Options{Nodes: 3, Binds: []string{shared + ":/shared"}, Logf: logf})
	if err != nil {
		return false, err
	}
	defer c.Close()
	if err := eachNode(c.Nodes, func(n *vmtests.Node) error { return vmtests.InstallPackage(ctx, n, deb) }); err != nil {
		return false, err
	}
	logf("installed %s on %d nodes", filepath.Base(deb), len(c.Nodes))
	e := &env{ctx: ctx, c: c, witness: witness, shared: shared, tmp: tmp, p: p}
	rep := Report{Profile: p.name, Timing: p.timing, DropIn: p.dropIn, Package: filepath.Base(deb), Runs: runs, Pass: true}
	for _, sc := range scenarios {
		if !only.MatchString(sc.name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		res := e.scenario(sc, runs)
		if res.Error != "" {
			logf("%s: %s", sc.name, res.Error)
		}
		rep.Scenarios = append(rep.Scenarios, res)
		rep.Pass = rep.Pass && res.Summary.Pass
		rep.LeaseSpan = max(rep.LeaseSpan, e.leaseSpan)
	}
	rep.Took = time.Since(began)
	fmt.Printf("\nunitlease fault scenarios, profile %s (lease span %v), %d run(s) each, %s\n\n", p.name, rep.LeaseSpan, runs, rep.Package)
	if err := Table(os.Stdout, rep.Scenarios); err != nil {
		return false, err
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(jsonPath), 0o755); err != nil {
		return false, err
	}
	if err := os.WriteFile(jsonPath, append(data, '\n'), 0o644); err != nil {
		return false, err
	}
	result := "every run passed"
	if !rep.Pass {
		result = "FAILED: see the problems of each run in the JSON"
	}
	failures(os.Stdout, rep.Scenarios)
	fmt.Printf("\n%s; took %v; runs in %s\n", result, rep.Took.Round(time.Second), jsonPath)
	return rep.Pass, nil
}

// failures prints, under the table, why each failed scenario failed (the
// error that ended it and the problems of its failed runs) and why a
// first setup failed, so that the tail of a log says what went wrong.
func failures(w io.Writer, scs []Scenario) {
	for _, sc := range scs {
		if sc.SetupRetry != "" {
			first, _, _ := strings.Cut(sc.SetupRetry, "\n")
			fmt.Fprintf(w, "%s: the first setup failed (set up again): %s\n", sc.Name, first)
		}
		if sc.Summary.Pass {
			continue
		}
		if sc.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", sc.Name, sc.Error)
		}
		for i, r := range sc.Runs {
			if !r.Pass {
				fmt.Fprintf(w, "%s run %d: %s\n", sc.Name, i+1, strings.Join(r.Problems, "; "))
			}
		}
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// buildPackage runs `make package` into dir with the version make derives
// and returns the .deb.
func buildPackage(ctx context.Context, dir string) (string, error) {
	version, err := makeIn(ctx, "-s", "package-version")
	if err != nil {
		return "", err
	}
	if _, err := makeIn(ctx, "-s", "package", "DIST="+dir, "VERSION="+version); err != nil {
		return "", err
	}
	deb := filepath.Join(dir, fmt.Sprintf("unitlease_%s_%s.deb", version, runtime.GOARCH))
	if _, err := os.Stat(deb); err != nil {
		return "", fmt.Errorf("make package: %w", err)
	}
	return deb, nil
}

// makeIn runs make in the current directory (the repository's root).
func makeIn(ctx context.Context, args ...string) (string, error) {
	return vmtests.Make(ctx, ".", nil, args...)
}

// eachNode runs f on every node at once.
func eachNode(nodes []*vmtests.Node, f func(n *vmtests.Node) error) error {
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() { errs <- f(n) }()
	}
	var all []error
	for range nodes {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}
