//go:build linux

package vmtests

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The package boots one cluster of three nodes for all tests that need no
// cluster of their own. Tests that change a node put it back as it was.
var (
	cluster   *Cluster
	sharedDir string // bound into every node of cluster at /shared
	probeBin  string // testdata/probe, built static
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if err := CheckHost(); err != nil {
		fmt.Fprintln(os.Stderr, "vm-tests cannot run here:", err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "ul-vmtests-")
	if err != nil {
		log.Print(err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if err := setupPackage(tmp); err != nil {
		log.Print(err)
		return 1
	}
	code := m.Run()
	if err := cluster.Close(); err != nil {
		log.Print(err)
		code = 1
	}
	return code
}

func setupPackage(tmp string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	probeBin = filepath.Join(tmp, "probe")
	if err := BuildStatic(ctx, "./testdata/probe", probeBin); err != nil {
		return err
	}
	sharedDir = filepath.Join(tmp, "shared")
	if err := os.Mkdir(sharedDir, 0o755); err != nil {
		return err
	}
	if _, err := EnsureRootfs(ctx, RootfsOptions{Logf: log.Printf}); err != nil {
		return err
	}
	start := time.Now()
	c, err := NewCluster(ctx, Options{Nodes: 3, Binds: []string{sharedDir + ":/shared"}, Logf: log.Printf})
	if err != nil {
		return err
	}
	log.Printf("cluster %s of 3 nodes up in %v", c.ID, time.Since(start).Round(time.Millisecond))
	cluster = c
	return nil
}

// run runs args in n and fails the test on error; it returns stdout
// without the trailing newline.
func run(t *testing.T, n *Node, args ...string) string {
	t.Helper()
	out, _, err := n.Run(t.Context(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return trimNL(out)
}

func trimNL(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// installProbe copies the probe into n as /usr/local/bin/ul-probe.
func installProbe(t *testing.T, n *Node) {
	t.Helper()
	if err := n.CopyIn(t.Context(), probeBin, "/usr/local/bin/ul-probe", 0o755); err != nil {
		t.Fatal(err)
	}
}
