//go:build linux

package vmtests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// nodeEnv is the environment of commands run inside nodes: the host's
// environment does not leak in.
var nodeEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
	"TERM=dumb",
	"SYSTEMD_PAGER=",
	"SYSTEMD_COLORS=0",
}

// Command prepares args to run inside the node, in all of its namespaces
// (nsenter -t INIT_PID -a), as root. Start fails if the node is down.
//
// The process is not in the node's cgroup (run it with systemd-run inside
// for that); it dies with the node. To stop it, cancel ctx: that kills the
// process inside the node, and nsenter (cmd.Process) then exits. Killing
// cmd.Process directly also kills the process inside (setpriv
// --pdeathsig), but leaves it a zombie of the host's PID 1 for a while,
// which delays a clean shutdown of the node.
func (n *Node) Command(ctx context.Context, args ...string) *exec.Cmd {
	return n.command(ctx, n.InitPID(), args...)
}

func (n *Node) command(ctx context.Context, initPID int, args ...string) *exec.Cmd {
	nsArgs := []string{"-t", strconv.Itoa(initPID), "-a", "--", "setpriv", "--pdeathsig", "KILL", "--"}
	cmd := exec.CommandContext(ctx, n.cluster.tools.nsenter, append(nsArgs, args...)...)
	cmd.Env = nodeEnv
	cmd.Cancel = func() error { return killInside(cmd.Process) }
	cmd.WaitDelay = 5 * time.Second
	if initPID == 0 {
		cmd.Err = fmt.Errorf("node %s is not running", n.Name)
	}
	return cmd
}

// killInside kills the child that nsenter forked into the node, so that
// nsenter reaps it and exits; nsenter itself is killed only if it has no
// child yet.
func killInside(nsenter *os.Process) error {
	children := childrenOf(nsenter.Pid)
	if len(children) == 0 {
		return nsenter.Kill()
	}
	for _, pid := range children {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return nil
}

// Run runs args inside the node and returns its standard output and
// error. A non-zero exit is an error that wraps *exec.ExitError and quotes
// the standard error.
func (n *Node) Run(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return n.run(ctx, n.InitPID(), nil, args...)
}

func (n *Node) run(ctx context.Context, initPID int, stdin io.Reader, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	cmd := n.command(ctx, initPID, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("node %s: %.200q: %w: %s", n.Name, args, err, tail(errOut.Bytes(), 1000))
	}
	return out.String(), errOut.String(), nil
}

// copyScript writes its standard input to $1 with mode $2, atomically
// (a rename), creating the parent directories.
const copyScript = `set -e
mkdir -p "$(dirname "$1")"
t="$1.ul-copy.$$"
cat > "$t"
chmod "$2" "$t"
mv -f "$t" "$1"`

// CopyIn copies the host file hostPath to nodePath inside the running node
// with the given permission bits, replacing nodePath atomically (even a
// running binary) and creating its parent directories.
func (n *Node) CopyIn(ctx context.Context, hostPath, nodePath string, mode fs.FileMode) error {
	f, err := os.Open(hostPath)
	if err != nil {
		return err
	}
	defer f.Close()
	return n.writeIn(ctx, f, nodePath, mode)
}

// WriteFile writes data to nodePath inside the running node, like CopyIn.
func (n *Node) WriteFile(ctx context.Context, nodePath string, data []byte, mode fs.FileMode) error {
	return n.writeIn(ctx, bytes.NewReader(data), nodePath, mode)
}

func (n *Node) writeIn(ctx context.Context, r io.Reader, nodePath string, mode fs.FileMode) error {
	if nodePath == "" || nodePath[0] != '/' {
		return errors.New("node path must be absolute: " + nodePath)
	}
	perm := strconv.FormatUint(uint64(mode.Perm()), 8)
	_, _, err := n.run(ctx, n.InitPID(), r, "sh", "-c", copyScript, "sh", nodePath, perm)
	return err
}
