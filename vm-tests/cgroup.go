//go:build linux

package vmtests

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupRoots are the hierarchies in which every node gets a cgroup of its
// own: the cgroup2 hierarchy and, on a hybrid host, the
// named v1 "systemd" hierarchy that the container's systemd also uses.
type cgroupRoots struct {
	unified string // cgroup2 mount point
	named   string // name=systemd v1 mount point, "" on a pure cgroup2 host
}

func findCgroupRoots() (cgroupRoots, error) {
	mounts, err := readMountInfo()
	if err != nil {
		return cgroupRoots{}, err
	}
	var r cgroupRoots
	for _, m := range mounts {
		switch {
		case m.fstype == "cgroup2" && r.unified == "":
			r.unified = m.point
		case m.fstype == "cgroup" && r.named == "" && hasOpt(m.opts, "name=systemd"):
			r.named = m.point
		}
	}
	if r.unified == "" {
		return r, errors.New("no cgroup2 hierarchy is mounted (expected /sys/fs/cgroup/unified or /sys/fs/cgroup)")
	}
	return r, nil
}

func hasOpt(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

func (r cgroupRoots) list() []string {
	if r.named == "" {
		return []string{r.unified}
	}
	return []string{r.unified, r.named}
}

// cgroup is one node's cgroup, a directory named after the node at the top
// of every hierarchy.
type cgroup struct {
	dirs []string // dirs[0] is in the cgroup2 hierarchy
}

func newCgroup(roots cgroupRoots, name string) cgroup {
	var c cgroup
	for _, root := range roots.list() {
		c.dirs = append(c.dirs, filepath.Join(root, name))
	}
	return c
}

func (c cgroup) create() error {
	for _, d := range c.dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// procsFiles are the cgroup.procs files a launcher writes its PID into.
func (c cgroup) procsFiles() []string {
	out := make([]string, len(c.dirs))
	for i, d := range c.dirs {
		out[i] = filepath.Join(d, "cgroup.procs")
	}
	return out
}

// pids lists every process in the cgroup and its descendants, in every
// hierarchy.
func (c cgroup) pids() []int {
	seen := map[int]bool{}
	for _, d := range c.dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

// kill sends SIGKILL to every process in the cgroup: at once through
// cgroup.kill where the kernel has it (5.14+), else one by one.
func (c cgroup) kill() {
	if !c.exists() {
		return
	}
	if err := os.WriteFile(filepath.Join(c.dirs[0], "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	for _, pid := range c.pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// waitEmpty waits until no process is left in the cgroup.
func (c cgroup) waitEmpty(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := c.pids()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still holds processes %v after %v", c.dirs[0], pids, timeout)
		}
		c.kill()
		time.Sleep(20 * time.Millisecond)
	}
}

// remove kills what is left in the cgroup and removes it with all its
// children (which the container's systemd created) in every hierarchy.
func (c cgroup) remove() error {
	if !c.exists() {
		return nil
	}
	c.kill()
	if err := c.waitEmpty(10 * time.Second); err != nil {
		return err
	}
	var errs []error
	for _, d := range c.dirs {
		errs = append(errs, rmdirTree(d))
	}
	return errors.Join(errs...)
}

// removeChildren empties the cgroup of the child groups that a previous
// boot's nspawn and systemd left, keeping the node's own group.
func (c cgroup) removeChildren() error {
	var errs []error
	for _, d := range c.dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				errs = append(errs, rmdirTree(filepath.Join(d, e.Name())))
			}
		}
	}
	return errors.Join(errs...)
}

func (c cgroup) exists() bool {
	for _, d := range c.dirs {
		if exists(d) {
			return true
		}
	}
	return false
}

// rmdirTree removes an empty cgroup directory tree, children first (cgroup
// directories hold only kernel files, which rmdir takes along).
func rmdirTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
