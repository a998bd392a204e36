package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of a control connection, as the
// kernel reports it (SO_PEERCRED).
type Peer struct {
	PID int32
	UID uint32
}

type peerKey struct{}

// PeerOf returns the caller of the request whose context this is; false
// for a call that did not come over the socket.
func PeerOf(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// MaxConns bounds the connections the socket serves at once; more wait
// in the kernel's backlog.
const MaxConns = 32

// rootOnly admits connections from root (or the user the daemon runs
// as) only, at most MaxConns at once.
type rootOnly struct {
	net.Listener
	slots chan struct{}
}

func (l *rootOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := peerCred(c)
		if err != nil || p.UID != 0 && int(p.UID) != os.Geteuid() {
			c.Close()
			continue
		}
		l.slots <- struct{}{}
		return &peerConn{Conn: c, peer: p, slots: l.slots}, nil
	}
}

type peerConn struct {
	net.Conn
	peer  Peer
	slots chan struct{}
	once  sync.Once
}

func (c *peerConn) Close() error {
	c.once.Do(func() { <-c.slots })
	return c.Conn.Close()
}

func peerCred(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if serr != nil {
		return Peer{}, serr
	}
	return Peer{PID: cred.Pid, UID: cred.Uid}, nil
}

// connContext carries a connection's peer into its requests' contexts.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.peer)
	}
	return ctx
}

// InCgroup reports whether process pid runs in cgroup cg (as systemd
// reports a unit's ControlGroup) or one below it, from /proc/PID/cgroup:
// what the guard, run as the unit's ExecStartPre=, does. Only the
// hierarchies systemd's tree is in count: the unified one ("0::") and,
// on a hybrid system, "name=systemd".
func InCgroup(pid int32, cg string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return err == nil && inCgroup(string(data), cg)
}

// inCgroup is InCgroup on the text of /proc/PID/cgroup.
func inCgroup(text, cg string) bool {
	if cg == "" || cg == "/" {
		return false
	}
	return slices.ContainsFunc(systemdCgroups(text), func(p string) bool { return p == cg || strings.HasPrefix(p, cg+"/") })
}

// systemdCgroups are the paths of /proc/PID/cgroup's text in the
// hierarchies systemd's tree is in.
func systemdCgroups(text string) []string {
	var paths []string
	for _, line := range strings.Split(text, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[0] == "0" && parts[1] == "" || parts[1] == "name=systemd") {
			paths = append(paths, parts[2])
		}
	}
	return paths
}

// InUnitCgroup reports whether process pid runs in a cgroup that only
// systemd's system manager makes, for unit: /A.slice/A-B.slice/UNIT, a
// chain of slices as systemd nests them (each named after the one above
// it), then the unit. It needs no call to systemd, which may be busy with
// a thousand starts when the guard asks. It is never true where InCgroup
// with the unit's ControlGroup would not be for a process systemd placed:
// a sub-cgroup (Delegate=), a name systemd escapes in the tree (one that
// starts with "_" or ".", or with a controller's name and a "."), a user
// manager's or a container's unit (a systemd inside a container nests its
// own slices under the container's cgroup, whose name is no slice of the
// chain); for those the caller asks systemd.
func InUnitCgroup(pid int32, unit string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return err == nil && inUnitCgroup(string(data), unit)
}

// inUnitCgroup is InUnitCgroup on the text of /proc/PID/cgroup.
func inUnitCgroup(text, unit string) bool {
	if strings.ContainsAny(unit, "/\n") || escapedInCgroups(unit) {
		return false
	}
	return slices.ContainsFunc(systemdCgroups(text), func(p string) bool {
		dir, ok := strings.CutSuffix(p, "/"+unit)
		return ok && strings.HasPrefix(dir, "/") && nestedSlices(strings.Split(dir[1:], "/"))
	})
}

// cgroupControllers are the controller names systemd escapes a name for
// (its cgroup_controller_table) and the kernel's cgroup v1 controllers,
// which older systemd read.
var cgroupControllers = []string{
	"cpu", "cpuacct", "cpuset", "io", "blkio", "memory", "devices", "pids",
	"bpf-firewall", "bpf-devices", "bpf-foreign", "bpf-socket-bind", "bpf-restrict-network-interfaces",
	"net_cls", "net_prio", "perf_event", "hugetlb", "freezer", "rdma", "misc", "debug",
}

// escapedInCgroups reports whether systemd names name's cgroup otherwise
// than name (cg_escape puts a "_" in front): a name that starts with "_"
// or ".", is one of a cgroup's own files, or starts with a controller's
// name and a ".". Broader than systemd where it errs: such a unit is
// left to the check against its ControlGroup.
func escapedInCgroups(name string) bool {
	if name == "" || name[0] == '_' || name[0] == '.' || strings.HasPrefix(name, "cgroup.") ||
		name == "notify_on_release" || name == "release_agent" || name == "tasks" {
		return true
	}
	return slices.ContainsFunc(cgroupControllers, func(c string) bool { return strings.HasPrefix(name, c+".") })
}

// nestedSlices reports whether parts are slices as systemd nests them:
// a.slice, a-b.slice, a-b-c.slice, each escaped as systemd escapes it.
func nestedSlices(parts []string) bool {
	prev := ""
	for i, p := range parts {
		name := p
		if rest, ok := strings.CutPrefix(p, "_"); ok {
			if name = rest; !escapedInCgroups(name) {
				return false
			}
		} else if escapedInCgroups(p) {
			return false
		}
		base, ok := strings.CutSuffix(name, ".slice")
		if !ok || base == "" || strings.HasPrefix(base, "-") || strings.HasSuffix(base, "-") || strings.Contains(base, "--") {
			return false
		}
		if i == 0 {
			if strings.Contains(base, "-") {
				return false
			}
		} else if rest, ok := strings.CutPrefix(base, prev+"-"); !ok || rest == "" || strings.Contains(rest, "-") {
			return false
		}
		prev = base
	}
	return len(parts) > 0
}

// secureDir makes dir, root's (or this user's) directory of mode 0700:
// created if missing, its mode enforced if it exists; a symlink or a
// directory another user owns is refused.
func secureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("control socket: %s is not a directory", dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("control socket: %s is owned by uid %d, not root", dir, sys.Uid)
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
	}
	return nil
}
