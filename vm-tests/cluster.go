//go:build linux

package vmtests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// StateRoot holds one directory per cluster (node overlays, console logs,
// the owner's PID) while the cluster is open.
const StateRoot = "/run/unitlease-vm"

// namePrefix starts the name of every node, cgroup and state of the
// harness; leftovers of interrupted runs are found by it.
const namePrefix = "ul-"

// Options describe a cluster.
type Options struct {
	Nodes         int           // how many nodes to boot; at least 1
	Rootfs        string        // tree to boot; default: EnsureRootfs with default options
	Binds         []string      // host directories in every node, as systemd-nspawn --bind=SRC[:DST[:OPTS]]
	BindsRO       []string      // same, read-only (--bind-ro=)
	NspawnArgs    []string      // more systemd-nspawn arguments
	BootTimeout   time.Duration // bound on each boot until systemd reports running; default 2 minutes
	AllowDegraded bool          // accept a degraded boot (failed units are logged) instead of failing
	Logf          func(format string, args ...any)
}

// Cluster is a set of nodes booted together. Close tears everything down;
// it also runs on SIGINT, SIGTERM and SIGHUP, and a reaper process kills
// the nodes if the test process dies without closing (see README.md).
type Cluster struct {
	ID    string
	Nodes []*Node

	opts    Options
	dir     string // state directory of this cluster
	tools   tools
	closing context.Context // done once Close starts
	cancel  context.CancelFunc
	reaper  *reaper

	closeOnce sync.Once
	closeErr  error
}

type tools struct{ nspawn, nsenter, sh string }

// NewTestCluster is NewCluster for one test: it fails tb at once on error
// and closes the cluster when tb ends.
func NewTestCluster(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Logf == nil {
		opts.Logf = tb.Logf
	}
	c, err := NewCluster(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

// NewCluster boots opts.Nodes nodes in parallel and returns once each
// reports running. It first removes what interrupted runs left behind.
func NewCluster(ctx context.Context, opts Options) (*Cluster, error) {
	if err := CheckHost(); err != nil {
		return nil, err
	}
	c, err := newCluster(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := c.setup(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	if err := c.bootAll(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

func newCluster(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Nodes < 1 {
		return nil, errors.New("vmtests: Options.Nodes must be at least 1")
	}
	if opts.BootTimeout == 0 {
		opts.BootTimeout = 2 * time.Minute
	}
	if opts.Rootfs == "" {
		dir, err := EnsureRootfs(ctx, RootfsOptions{Logf: opts.Logf})
		if err != nil {
			return nil, err
		}
		opts.Rootfs = dir
	}
	t, err := findTools()
	if err != nil {
		return nil, err
	}
	c := &Cluster{ID: randomHex(3), opts: opts, tools: t}
	c.dir = filepath.Join(StateRoot, c.ID)
	c.closing, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

func findTools() (tools, error) {
	var t tools
	var errs []error
	for _, x := range []struct {
		name string
		dst  *string
	}{{"systemd-nspawn", &t.nspawn}, {"nsenter", &t.nsenter}, {"sh", &t.sh}} {
		p, err := lookTool(x.name)
		*x.dst = p
		errs = append(errs, err)
	}
	return t, errors.Join(errs...)
}

// setup sweeps leftovers, claims the state directory, starts the reaper
// and prepares every node's disk.
func (c *Cluster) setup() error {
	roots, err := findCgroupRoots()
	if err != nil {
		return err
	}
	if err := c.claimStateDir(roots); err != nil {
		return err
	}
	onSignal(c, c.Close)
	for i := range c.opts.Nodes {
		name := fmt.Sprintf("%s%s-%d", namePrefix, c.ID, i+1)
		n := &Node{Name: name, cluster: c, dir: filepath.Join(c.dir, name), cg: newCgroup(roots, name)}
		c.Nodes = append(c.Nodes, n)
	}
	if c.reaper, err = startReaper(c.tools.sh, c.Nodes); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if err := n.prepareDisk(c.opts.Rootfs); err != nil {
			return err
		}
	}
	return nil
}

// claimStateDir sweeps what dead owners left and creates this cluster's
// state directory with its owner file, under the state root's lock.
func (c *Cluster) claimStateDir(roots cgroupRoots) error {
	if err := os.MkdirAll(StateRoot, 0o755); err != nil {
		return err
	}
	unlock, err := lockFile(context.Background(), filepath.Join(StateRoot, ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if err := sweepLeftovers(StateRoot, roots, c.opts.Logf); err != nil {
		return fmt.Errorf("removing leftovers of an earlier run: %w", err)
	}
	if err := os.Mkdir(c.dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(selfOwner().String()), 0o644)
}

func (c *Cluster) bootAll(ctx context.Context) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() {
			if errs[i] = n.Boot(ctx); errs[i] == nil {
				logf(c.opts.Logf, "node %s running after %v", n.Name, n.BootTime().Round(time.Millisecond))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Node returns the i-th node, counting from 0.
func (c *Cluster) Node(i int) *Node { return c.Nodes[i] }

// StateDir is the cluster's directory under the state root.
func (c *Cluster) StateDir() string { return c.dir }

// Close kills every node and removes their cgroups, overlay mounts and
// state. It is safe to call more than once and from several goroutines.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Cluster) close() error {
	c.cancel()
	errs := make([]error, len(c.Nodes)+1)
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = n.teardown() })
	}
	wg.Wait()
	if c.reaper != nil {
		c.reaper.stop()
	}
	errs[len(c.Nodes)] = removeTree(c.dir)
	offSignal(c)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("vmtests: closing cluster %s: %w", c.ID, err)
	}
	return nil
}

// prepareDisk mounts the node's overlay and gives it its own identity:
// host name, machine ID and /etc/hosts.
func (n *Node) prepareDisk(lower string) error {
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := mountOverlay(lower, filepath.Join(n.dir, "upper"), filepath.Join(n.dir, "work"), n.RootDir()); err != nil {
		return err
	}
	return n.writeIdentity()
}

func (n *Node) writeIdentity() error {
	root, err := os.OpenRoot(n.RootDir())
	if err != nil {
		return err
	}
	defer root.Close()
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n", n.Name)
	files := []struct {
		path, data string
		mode       os.FileMode
	}{
		{"etc/hostname", n.Name + "\n", 0o644},
		{"etc/machine-id", randomHex(16) + "\n", 0o444},
		{"etc/hosts", hosts, 0o644},
	}
	for _, f := range files {
		_ = root.Remove(f.path)
		if err := root.WriteFile(f.path, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}
