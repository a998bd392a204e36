//go:build linux

package vmtests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNodesRunSystemdAsPID1(t *testing.T) {
	ids := map[string]bool{}
	for _, n := range cluster.Nodes {
		if got := run(t, n, "cat", "/proc/1/comm"); got != "systemd" {
			t.Errorf("%s: PID 1 is %q, want systemd", n.Name, got)
		}
		if got := run(t, n, "systemctl", "is-system-running"); got != "running" {
			t.Errorf("%s: is-system-running = %q", n.Name, got)
		}
		if got := run(t, n, "hostname"); got != n.Name {
			t.Errorf("%s: hostname = %q", n.Name, got)
		}
		ids[run(t, n, "cat", "/etc/machine-id")] = true
	}
	if len(ids) != len(cluster.Nodes) {
		t.Errorf("machine IDs are not distinct: %v", ids)
	}
}

func TestNodesReachHostLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	heard := make(chan string, len(cluster.Nodes))
	go serveHello(ln, heard)
	for _, n := range cluster.Nodes {
		installProbe(t, n)
		want := "hello " + n.Name
		if got := run(t, n, "ul-probe", "dial", ln.Addr().String(), n.Name); got != want {
			t.Errorf("%s: reply %q, want %q", n.Name, got, want)
		}
		if got := <-heard; got != n.Name {
			t.Errorf("listener heard %q, want %q", got, n.Name)
		}
	}
}

// serveHello answers each connection's first line with "hello LINE" and
// reports the line.
func serveHello(ln net.Listener, heard chan<- string) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		line = strings.TrimSpace(line)
		fmt.Fprintf(conn, "hello %s\n", line)
		conn.Close()
		heard <- line
	}
}

func TestCopyIn(t *testing.T) {
	n := cluster.Node(0)
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("copied\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{"/etc/ul-test/sub/f", "/tmp/ul-f"} {
		if err := n.CopyIn(t.Context(), src, dst, 0o640); err != nil {
			t.Fatal(err)
		}
		if got := run(t, n, "stat", "-c", "%a %U", dst); got != "640 root" {
			t.Errorf("%s: mode and owner %q", dst, got)
		}
		if got := run(t, n, "cat", dst); got != "copied" {
			t.Errorf("%s: content %q", dst, got)
		}
	}
	if err := n.WriteFile(t.Context(), "relative", nil, 0o644); err == nil {
		t.Error("WriteFile accepted a relative path")
	}
}

func TestBindMountIsShared(t *testing.T) {
	a, b := cluster.Node(0), cluster.Node(1)
	run(t, a, "sh", "-c", "echo from-"+a.Name+" > /shared/note")
	if got := run(t, b, "cat", "/shared/note"); got != "from-"+a.Name {
		t.Errorf("node b reads %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(sharedDir, "note")); string(got) != "from-"+a.Name+"\n" {
		t.Errorf("host reads %q", got)
	}
}

// TestSharedFileLockExcludes shows the witness's exclusion fixture: a flock on the shared file taken in one node is seen by the other.
func TestSharedFileLockExcludes(t *testing.T) {
	a, b := cluster.Node(0), cluster.Node(1)
	installProbe(t, a)
	release := holdLock(t, a, "/shared/lock")
	_, _, err := b.Run(t.Context(), "flock", "--nonblock", "--conflict-exit-code", "42", "/shared/lock", "true")
	if code := exitCode(err); code != 42 {
		t.Fatalf("flock in %s while %s holds it: exit %d (%v), want 42", b.Name, a.Name, code, err)
	}
	release()
	run(t, b, "flock", "--nonblock", "/shared/lock", "true")
}

// holdLock takes the lock in n with the probe and returns a function that
// releases it and waits until the holder has exited.
func holdLock(t *testing.T, n *Node, path string) (release func()) {
	t.Helper()
	cmd := n.Command(t.Context(), "ul-probe", "lock", path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "locked\n" {
		t.Fatalf("probe lock in %s: %q, %v", n.Name, line, errors.Join(err, cmd.Wait()))
	}
	return func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("lock holder in %s: %v", n.Name, err)
		}
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

func TestPowerCutEndsEveryProcessOfOneNode(t *testing.T) {
	cut, other := cluster.Node(1), cluster.Node(0)
	ctx := t.Context()
	run(t, cut, "systemd-run", "--unit=ul-sleeper", "sleep", "infinity")
	run(t, cut, "sh", "-c", "mkdir -p /var/lib/ul-test && echo before-cut > /var/lib/ul-test/marker")
	cutShell := startSleeper(t, cut)
	otherShell := startSleeper(t, other)
	otherInit, ns := other.InitPID(), pidNamespace(cut.InitPID())
	before := processesInPidNS(ns)
	if len(before) < 5 {
		t.Fatalf("only %d processes in %s before the cut: %v", len(before), cut.Name, before)
	}

	if err := cut.PowerCut(ctx); err != nil {
		t.Fatal(err)
	}
	if left := processesInPidNS(ns); len(left) > 0 {
		t.Errorf("processes of %s alive after the power cut: %v", cut.Name, left)
	}
	if cut.Running() || cut.InitPID() != 0 {
		t.Errorf("%s still reported running", cut.Name)
	}
	if err := waitCmd(cutShell.Cmd); err == nil {
		t.Error("a command inside the cut node exited cleanly")
	}
	if other.InitPID() != otherInit || !processAlive(otherShell.Process.Pid) {
		t.Errorf("%s was disturbed by the power cut of %s", other.Name, cut.Name)
	}
	if got := run(t, other, "systemctl", "is-system-running"); got != "running" {
		t.Errorf("%s: is-system-running = %q after the other's power cut", other.Name, got)
	}
	otherShell.stop(t)
	rebootAfterCut(t, cut, before)
}

// rebootAfterCut boots the node again and checks that its disk survived
// and its runtime state did not.
func rebootAfterCut(t *testing.T, n *Node, oldPIDs []int) {
	if err := n.Boot(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s rebooted in %v", n.Name, n.BootTime().Round(time.Millisecond))
	if got := run(t, n, "cat", "/var/lib/ul-test/marker"); got != "before-cut" {
		t.Errorf("marker after reboot: %q", got)
	}
	if got, _, _ := n.Run(t.Context(), "systemctl", "is-active", "ul-sleeper"); trimNL(got) != "inactive" {
		t.Errorf("transient unit after reboot: %q", got)
	}
	if got := run(t, n, "systemctl", "is-system-running"); got != "running" {
		t.Errorf("is-system-running after reboot = %q", got)
	}
	for _, pid := range oldPIDs {
		if pid == n.InitPID() {
			t.Errorf("new init has an old PID %d", pid)
		}
	}
}

// sleeper is `sleep infinity` started in a node through nsenter.
type sleeper struct {
	*exec.Cmd
	cancel context.CancelFunc
}

// startSleeper starts a sleeper in n and returns once it runs.
func startSleeper(t *testing.T, n *Node) sleeper {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	cmd := n.Command(ctx, "sh", "-c", "echo up; exec sleep infinity")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "up\n" {
		t.Fatalf("sleeper in %s: %q", n.Name, line)
	}
	return sleeper{cmd, cancel}
}

// stop cancels the sleeper, which kills it inside the node.
func (s sleeper) stop(t *testing.T) {
	s.cancel()
	if err := waitCmd(s.Cmd); err == nil {
		t.Errorf("cancelled sleeper exited cleanly")
	}
}

// waitCmd waits for cmd with a generous bound, so a bug cannot hang the
// test.
func waitCmd(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%v still running after 30s", cmd.Args)
	}
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

func TestCleanStopAndBoot(t *testing.T) {
	n := cluster.Node(0)
	if err := n.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n.Running() {
		t.Fatal("node still running after Stop")
	}
	if _, _, err := n.Run(t.Context(), "true"); err == nil {
		t.Error("Run on a stopped node succeeded")
	}
	if err := n.Boot(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := run(t, n, "systemctl", "is-system-running"); got != "running" {
		t.Errorf("is-system-running after Stop and Boot = %q", got)
	}
}

// leftovers records what a cluster put on the host, to check that none of
// it remains.
type leftovers struct {
	stateDir string
	cgroups  []string
	pidNS    []string
	nspawn   []int
	names    []string
}

func recordLeftovers(c *Cluster) leftovers {
	l := leftovers{stateDir: c.StateDir()}
	for _, n := range c.Nodes {
		l.cgroups = append(l.cgroups, n.cg.dirs...)
		l.pidNS = append(l.pidNS, pidNamespace(n.InitPID()))
		l.nspawn = append(l.nspawn, n.running().cmd.Process.Pid)
		l.names = append(l.names, n.Name)
	}
	return l
}

func (l leftovers) check(t *testing.T) {
	t.Helper()
	if m, err := mountsUnder(l.stateDir); err != nil || len(m) > 0 {
		t.Errorf("mounts left: %v %v", m, err)
	}
	for _, p := range append(l.cgroups, l.stateDir) {
		if exists(p) {
			t.Errorf("left behind: %s", p)
		}
	}
	for _, name := range l.names {
		if exists(nspawnPropagateDir(name)) {
			t.Errorf("left behind: %s", nspawnPropagateDir(name))
		}
	}
	for _, ns := range l.pidNS {
		if p := processesInPidNS(ns); len(p) > 0 {
			t.Errorf("processes left in %s: %v", ns, p)
		}
	}
	for _, pid := range l.nspawn {
		if processAlive(pid) {
			t.Errorf("systemd-nspawn %d still running", pid)
		}
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	c := NewTestCluster(t, Options{Nodes: 1, Binds: []string{t.TempDir() + ":/shared"}})
	sleeper := startSleeper(t, c.Node(0))
	l := recordLeftovers(c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	l.check(t)
	if err := waitCmd(sleeper.Cmd); err == nil {
		t.Error("a command inside the closed node exited cleanly")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestAbandonedClusterIsReapedAndSwept plays a test process that dies
// without Close: its reaper kills the nodes, and the next cluster's sweep
// removes the rest.
func TestAbandonedClusterIsReapedAndSwept(t *testing.T) {
	c := NewTestCluster(t, Options{Nodes: 1})
	n := c.Node(0)
	l := recordLeftovers(c)
	b := n.running()
	offSignal(c)
	c.reaper.w.Close() // what the kernel does when the process dies
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		t.Fatal("reaper did not kill the node")
	}
	dead := owner{pid: os.Getpid(), start: "0"}
	if err := os.WriteFile(filepath.Join(c.StateDir(), ownerFile), []byte(dead.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	roots, err := findCgroupRoots()
	if err != nil {
		t.Fatal(err)
	}
	if err := sweepLeftovers(StateRoot, roots, t.Logf); err != nil {
		t.Fatal(err)
	}
	l.check(t)
	if !exists(cluster.StateDir()) || !cluster.Node(0).Running() {
		t.Error("the sweep touched the live cluster of this process")
	}
}

func TestLeftoverNamesParse(t *testing.T) {
	for name, want := range map[string]string{"ul-a1b2c3-1": "a1b2c3", "ul-x-12": "x", "ul-": "", "other-1": "", "ul-nodash": ""} {
		if got, _ := clusterOf(name); got != want {
			t.Errorf("clusterOf(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestAptSourcesParse(t *testing.T) {
	one := parseOneLineSources("# c\ndeb [arch=amd64 signed-by=/k.gpg] http://m/debian bookworm main\ndeb-src http://s/debian bookworm main\n")
	if len(one) != 2 || !one[0].serves("deb", "bookworm") || one[0].uris[0] != "http://m/debian" || one[1].serves("deb", "bookworm") {
		t.Errorf("one-line sources: %+v", one)
	}
	deb822 := parseDeb822Sources("Types: deb\nURIs: http://a/debian\nSuites: bookworm bookworm-updates\n\nTypes: deb\nURIs: http://b/debian\nSuites: bookworm\nEnabled: no\n")
	if len(deb822) != 2 || !deb822[0].serves("deb", "bookworm") || deb822[1].serves("deb", "bookworm") {
		t.Errorf("deb822 sources: %+v", deb822)
	}
}

func TestMountInfoParse(t *testing.T) {
	m, ok := parseMountInfo(`36 35 98:0 /mnt1 /a\040b rw,noatime master:1 - overlay overlay rw,lowerdir=/x`)
	if !ok || m.point != "/a b" || m.fstype != "overlay" || m.opts != "rw,lowerdir=/x" {
		t.Errorf("parseMountInfo: %+v %v", m, ok)
	}
}
