//go:build linux

package vmtests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Node is one systemd-nspawn container with systemd as PID 1. Its disk (an
// overlay over the cached root file system) survives power cuts and reboots
// until the cluster is closed.
type Node struct {
	Name string // machine name and host name, "ul-<cluster id>-<index>"

	cluster *Cluster
	dir     string // state: upper, work, root (the overlay), console.log
	cg      cgroup

	mu  sync.Mutex
	cur *boot // nil while the node is down
}

// boot is one run of systemd-nspawn, from start to exit.
type boot struct {
	cmd     *exec.Cmd     // sh, which execs systemd-nspawn
	done    chan struct{} // closed once systemd-nspawn has exited
	err     error         // its exit status, set before done is closed
	init    *os.Process   // the container's PID 1 (a pidfd, safe from PID reuse)
	initPID int
	pidNS   string
	took    time.Duration // from start until systemd reported running
}

// RootDir is the node's root file system as the host sees it (the overlay
// mount). Files written there before Boot are seen by the node; while it
// runs, prefer CopyIn and WriteFile: the node has its own tmpfs on /tmp and
// /run, and absolute symbolic links in the tree point into the host.
func (n *Node) RootDir() string { return filepath.Join(n.dir, "root") }

// ConsoleLog is the host file that collects the node's console output.
func (n *Node) ConsoleLog() string { return filepath.Join(n.dir, "console.log") }

// InitPID is the host PID of the node's systemd (PID 1 inside), or 0 while
// the node is down.
func (n *Node) InitPID() int {
	if b := n.running(); b != nil {
		return b.initPID
	}
	return 0
}

// Running reports whether the node is up.
func (n *Node) Running() bool { return n.running() != nil }

// BootTime is how long the last boot took until systemd reported running.
func (n *Node) BootTime() time.Duration {
	if b := n.running(); b != nil {
		return b.took
	}
	return 0
}

func (n *Node) running() *boot {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur
}

// Boot starts the node and waits until systemd inside reports the system
// running, or degraded if Options.AllowDegraded is set; the wait is bounded
// by ctx and Options.BootTimeout. Boot after PowerCut or Stop is a reboot
// with the same disk.
func (n *Node) Boot(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur != nil {
		return fmt.Errorf("node %s is already running", n.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cluster.opts.BootTimeout)
	defer cancel()
	defer context.AfterFunc(n.cluster.closing, cancel)()
	b, err := n.start()
	if err != nil {
		return err
	}
	if err := n.awaitReady(ctx, b); err != nil {
		n.kill(b)
		return err
	}
	n.cur = b
	return nil
}

// start launches systemd-nspawn in the node's own cgroup: a shell writes its PID into the cgroup in every hierarchy and then
// execs systemd-nspawn.
func (n *Node) start() (*boot, error) {
	if err := n.freshCgroup(); err != nil {
		return nil, err
	}
	console, err := os.OpenFile(n.ConsoleLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer console.Close()
	const enter = `while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"`
	args := append([]string{"-c", enter, "sh"}, n.cg.procsFiles()...)
	args = append(append(args, "--", n.cluster.tools.nspawn), n.nspawnArgs()...)
	cmd := exec.Command(n.cluster.tools.sh, args...)
	cmd.Stdout, cmd.Stderr = console, console // stdin is /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("node %s: start systemd-nspawn: %w", n.Name, err)
	}
	b := &boot{cmd: cmd, done: make(chan struct{})}
	go func() {
		b.err = cmd.Wait()
		close(b.done)
	}()
	return b, nil
}

// freshCgroup creates the node's cgroup, removing the child groups that a
// previous boot left.
func (n *Node) freshCgroup() error {
	n.cg.kill()
	if err := n.cg.waitEmpty(10 * time.Second); err != nil {
		return err
	}
	if err := n.cg.removeChildren(); err != nil {
		return err
	}
	return n.cg.create()
}

func (n *Node) nspawnArgs() []string {
	o := n.cluster.opts
	args := []string{
		"--register=no", "--keep-unit", "--quiet",
		"--directory=" + n.RootDir(), "--machine=" + n.Name, "--boot",
		"--console=read-only", "--link-journal=no",
	}
	for _, b := range o.Binds {
		args = append(args, "--bind="+b)
	}
	for _, b := range o.BindsRO {
		args = append(args, "--bind-ro="+b)
	}
	return append(args, o.NspawnArgs...)
}

// awaitReady finds the container's init and waits for systemd to finish
// booting.
func (n *Node) awaitReady(ctx context.Context, b *boot) error {
	start := time.Now()
	if err := n.findInit(ctx, b); err != nil {
		return err
	}
	if err := n.waitSystemRunning(ctx, b); err != nil {
		return err
	}
	b.took = time.Since(start)
	return nil
}

// findInit waits for the child of systemd-nspawn that is PID 1 of the new
// PID namespace.
func (n *Node) findInit(ctx context.Context, b *boot) error {
	for {
		for _, pid := range childrenOf(b.cmd.Process.Pid) {
			if !isNamespaceInit(pid) {
				continue
			}
			p, err := os.FindProcess(pid)
			if err != nil {
				return err
			}
			b.init, b.initPID, b.pidNS = p, pid, pidNamespace(pid)
			return nil
		}
		if err := n.pause(ctx, b, "waiting for the container's init"); err != nil {
			return err
		}
	}
}

// waitSystemRunning polls `systemctl is-system-running --wait` inside the
// node until systemd answers; before systemd listens it fails at once.
func (n *Node) waitSystemRunning(ctx context.Context, b *boot) error {
	state := ""
	for {
		out, _, _ := n.run(ctx, b.initPID, nil, "systemctl", "is-system-running", "--wait")
		state = strings.TrimSpace(out)
		switch state {
		case "running":
			return nil
		case "degraded":
			return n.degraded(ctx, b)
		case "maintenance", "stopping":
			return n.bootError(fmt.Errorf("systemd reports %q", state))
		}
		if err := n.pause(ctx, b, "waiting for systemd, last state "+fmt.Sprintf("%q", state)); err != nil {
			return err
		}
	}
}

func (n *Node) degraded(ctx context.Context, b *boot) error {
	out, _, _ := n.run(ctx, b.initPID, nil, "systemctl", "--failed", "--plain", "--no-legend", "--no-pager")
	failed := strings.TrimSpace(out)
	if n.cluster.opts.AllowDegraded {
		logf(n.cluster.opts.Logf, "node %s booted degraded; failed units:\n%s", n.Name, failed)
		return nil
	}
	return n.bootError(fmt.Errorf("systemd reports degraded; failed units:\n%s", failed))
}

// pause waits a little before the next poll and fails if the deadline has
// passed or systemd-nspawn has exited.
func (n *Node) pause(ctx context.Context, b *boot, what string) error {
	select {
	case <-ctx.Done():
		return n.bootError(fmt.Errorf("%s: %w", what, ctx.Err()))
	case <-b.done:
		return n.bootError(fmt.Errorf("systemd-nspawn exited while %s: %v", what, b.err))
	case <-time.After(50 * time.Millisecond):
		return nil
	}
}

func (n *Node) bootError(err error) error {
	b, _ := os.ReadFile(n.ConsoleLog())
	return fmt.Errorf("node %s: boot: %w\nconsole (%s), last lines:\n%s", n.Name, err, n.ConsoleLog(), tail(b, 2000))
}

// PowerCut sends SIGKILL to the node's init, which ends every process of
// the node at once, and waits until systemd-nspawn has exited. The disk
// keeps what was written to it; Boot starts the node again.
func (n *Node) PowerCut(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil {
		return fmt.Errorf("node %s is not running", n.Name)
	}
	_ = n.cur.init.Kill()
	return n.awaitExit(ctx)
}

// Stop shuts the node down cleanly (systemctl poweroff) and waits until
// systemd-nspawn has exited.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil {
		return fmt.Errorf("node %s is not running", n.Name)
	}
	if _, _, err := n.run(ctx, n.cur.initPID, nil, "systemctl", "poweroff", "--no-block"); err != nil {
		return err
	}
	return n.awaitExit(ctx)
}

// awaitExit waits for the running boot's systemd-nspawn to exit and marks
// the node down. The caller holds n.mu.
func (n *Node) awaitExit(ctx context.Context) error {
	select {
	case <-n.cur.done:
	case <-ctx.Done():
		return fmt.Errorf("node %s: waiting for systemd-nspawn to exit: %w", n.Name, ctx.Err())
	}
	n.cur = nil
	return n.cg.waitEmpty(10 * time.Second)
}

// kill ends a boot at once, whatever state it is in, and reaps it. It
// kills init first and lets systemd-nspawn reap it: killing both at once
// would leave init a zombie of the host's PID 1. Whatever is left in the
// cgroup is killed after that.
func (n *Node) kill(b *boot) {
	if b.init != nil {
		_ = b.init.Kill()
		waitDone(b.done, 10*time.Second)
	}
	n.cg.kill()
	waitDone(b.done, 30*time.Second)
}

func waitDone(done <-chan struct{}, timeout time.Duration) {
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// teardown kills the node and removes its cgroup, overlay and state.
func (n *Node) teardown() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur != nil {
		n.kill(n.cur)
		n.cur = nil
	}
	return errors.Join(
		n.cg.remove(),
		removeTree(n.dir),
		removeTree(nspawnPropagateDir(n.Name)),
	)
}

// nspawnPropagateDir is a directory systemd-nspawn makes on the host for
// each machine and leaves behind when it is killed.
func nspawnPropagateDir(name string) string {
	return filepath.Join("/run/systemd/nspawn/propagate", name)
}
