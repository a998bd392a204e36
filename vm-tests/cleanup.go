//go:build linux

package vmtests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// ownerFile, in a cluster's state directory, names the process that owns
// the cluster (PID and start time).
const ownerFile = "owner"

// registry holds what the signal handler must tear down: the open
// clusters and a running debootstrap.
var registry struct {
	sync.Mutex
	closers map[any]func() error
	once    sync.Once
}

// onSignal registers close to run, under key, when the process gets
// SIGINT, SIGTERM or SIGHUP.
func onSignal(key any, close func() error) {
	registry.once.Do(handleSignals)
	registry.Lock()
	defer registry.Unlock()
	if registry.closers == nil {
		registry.closers = map[any]func() error{}
	}
	registry.closers[key] = close
}

func offSignal(key any) {
	registry.Lock()
	defer registry.Unlock()
	delete(registry.closers, key)
}

// handleSignals closes everything registered on SIGINT, SIGTERM or SIGHUP
// and then dies of the same signal. A second signal during the teardown
// kills the process at once; the reaper and the next run's sweep then
// finish the job.
func handleSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-ch
		signal.Reset(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		fmt.Fprintf(os.Stderr, "vmtests: %v: tearing down\n", sig)
		closeAll()
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		os.Exit(2)
	}()
}

func closeAll() {
	registry.Lock()
	var closers []func() error
	for _, c := range registry.closers {
		closers = append(closers, c)
	}
	registry.Unlock()
	var wg sync.WaitGroup
	for _, c := range closers {
		wg.Go(func() {
			if err := c(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		})
	}
	wg.Wait()
}

// reaper is a shell that waits for EOF on a pipe whose only writer is this
// process. EOF comes when this process dies without closing the cluster
// (a test timeout's panic, SIGKILL); the shell then kills the containers
// (the payload cgroup that systemd-nspawn makes, so that systemd-nspawn
// reaps their init), then whatever is left in every node's cgroup. So no
// container outlives its test. Mounts, cgroups and state are removed by
// the next run's sweep.
type reaper struct {
	cmd *exec.Cmd
	w   *os.File
}

const reaperScript = `trap '' INT TERM HUP PIPE
while read -r _; do :; done
for d; do echo 1 > "$d/payload/cgroup.kill"; done 2>/dev/null
sleep 2
for d; do echo 1 > "$d/cgroup.kill"; done 2>/dev/null`

func startReaper(sh string, nodes []*Node) (*reaper, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	args := []string{"-c", reaperScript, "sh"}
	for _, n := range nodes {
		args = append(args, n.cg.dirs[0])
	}
	cmd := exec.Command(sh, args...)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("start reaper: %w", err)
	}
	return &reaper{cmd: cmd, w: w}, nil
}

// stop ends the reaper without letting it kill anything.
func (r *reaper) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.w.Close()
}

// sweepLeftovers removes what clusters of dead owners left: it kills their
// nodes through their cgroups and removes the cgroups, overlay mounts and
// state directories. Clusters of live owners (another test process) are
// left alone. The caller holds the state root's lock.
func sweepLeftovers(stateRoot string, roots cgroupRoots, logf func(string, ...any)) error {
	live := liveClusters(stateRoot)
	var errs []error
	for _, name := range leftoverNodes(roots, live) {
		if logf != nil {
			logf("vmtests: removing leftover node %s", name)
		}
		errs = append(errs, newCgroup(roots, name).remove(), removeTree(nspawnPropagateDir(name)))
	}
	entries, _ := os.ReadDir(stateRoot)
	for _, e := range entries {
		if e.IsDir() && !live[e.Name()] {
			errs = append(errs, removeTree(filepath.Join(stateRoot, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// liveClusters are the IDs of clusters whose owner still runs.
func liveClusters(stateRoot string) map[string]bool {
	live := map[string]bool{}
	entries, _ := os.ReadDir(stateRoot)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(stateRoot, e.Name(), ownerFile))
		if o, ok := parseOwner(string(b)); err == nil && ok && o.alive() {
			live[e.Name()] = true
		}
	}
	return live
}

// leftoverNodes names the nodes, found by their cgroups and nspawn
// directories, that belong to no live cluster.
func leftoverNodes(roots cgroupRoots, live map[string]bool) []string {
	seen := map[string]bool{}
	var out []string
	dirs := append(roots.list(), filepath.Dir(nspawnPropagateDir("x")))
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			id, ok := clusterOf(e.Name())
			if ok && e.IsDir() && !live[id] && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// clusterOf parses the cluster ID out of a node name "ul-<id>-<index>".
func clusterOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, "-")
	if !ok || id == "" {
		return "", false
	}
	return id, true
}
