//go:build linux

package vmtests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Suite is the Debian release that nodes run.
const Suite = "bookworm"

// DefaultCacheDir is where the root file system is cached unless
// UNITLEASE_VM_CACHE names another directory.
const DefaultCacheDir = "/var/cache/unitlease/vm-rootfs/" + Suite

// DefaultInclude are the packages debootstrap adds to minbase: systemd as
// init with D-Bus, and procps (ps, pgrep, pkill) for tests.
var DefaultInclude = []string{"systemd", "systemd-sysv", "dbus", "procps"}

// stampFile, inside the cached tree, records how the tree was built. It is
// renamed into place together with the tree, so a half-built cache never
// looks complete.
const stampFile = ".unitlease-vm-stamp"

// recipe changes whenever the harness changes what it does to a tree after
// debootstrap, so that caches built the old way are rebuilt.
const recipe = "1"

// RootfsOptions say how the cached root file system is built.
type RootfsOptions struct {
	Dir     string   // default: $UNITLEASE_VM_CACHE, else DefaultCacheDir
	Mirror  string   // default: $UNITLEASE_VM_MIRROR, else the host's apt source for Suite
	Include []string // default: DefaultInclude
	Logf    func(format string, args ...any)
}

func (o RootfsOptions) dir() string {
	if o.Dir != "" {
		return o.Dir
	}
	if d := os.Getenv("UNITLEASE_VM_CACHE"); d != "" {
		return d
	}
	return DefaultCacheDir
}

// debootstrapArgs are debootstrap's arguments before the target directory
// and the mirror.
func (o RootfsOptions) debootstrapArgs() []string {
	include := o.Include
	if len(include) == 0 {
		include = DefaultInclude
	}
	return []string{"--variant=minbase", "--include=" + strings.Join(include, ","), Suite}
}

// EnsureRootfs returns the directory of the cached Debian root file system,
// building it with debootstrap first if it is missing or was built with
// other arguments. Concurrent callers wait for one build.
func EnsureRootfs(ctx context.Context, opts RootfsOptions) (string, error) {
	dir := opts.dir()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	mirror := opts.mirror()
	args := opts.debootstrapArgs()
	stamp := fmt.Sprintf("debootstrap %s DIR %s\nrecipe %s\n", strings.Join(args, " "), mirror, recipe)
	if old, err := os.ReadFile(filepath.Join(dir, stampFile)); err == nil && string(old) == stamp {
		return dir, nil
	}
	if err := removeStaleBuilds(dir); err != nil {
		return "", err
	}
	start := time.Now()
	logf(opts.Logf, "building %s with debootstrap from %s (about a minute)", dir, mirror)
	tmp, err := buildRootfs(ctx, dir, args, mirror, stamp)
	if err != nil {
		return "", err
	}
	if err := replaceDir(tmp, dir); err != nil {
		return "", err
	}
	logf(opts.Logf, "built %s in %v", dir, time.Since(start).Round(100*time.Millisecond))
	return dir, nil
}

// buildRootfs runs debootstrap into a temporary directory beside dir and
// prepares the tree there.
func buildRootfs(ctx context.Context, dir string, args []string, mirror, stamp string) (string, error) {
	tool, err := lookTool("debootstrap")
	if err != nil {
		return "", fmt.Errorf("%w (apt-get install debootstrap)", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return "", err
	}
	// On SIGINT or SIGTERM, cancel debootstrap and wait (a while) until the
	// temporary tree is gone.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cleaned := make(chan struct{})
	onSignal(cleaned, func() error { cancel(); waitDone(cleaned, 30*time.Second); return nil })
	defer offSignal(cleaned)
	defer close(cleaned)
	err = runDebootstrap(ctx, tool, tmp, append(args, tmp, mirror))
	if err == nil {
		err = finishRootfs(tmp, stamp)
	}
	if err != nil {
		return "", errors.Join(err, removeTree(tmp))
	}
	return tmp, nil
}

// runDebootstrap runs debootstrap in a process group of its own, which is
// killed whole when ctx is done.
func runDebootstrap(ctx context.Context, tool, target string, args []string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(os.Environ(), "PATH="+sbinPath, "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	// debootstrap mounts /proc and /sys in the target while it works and
	// leaves them mounted when it is interrupted.
	umountErr := unmountAllUnder(target)
	if err != nil {
		return fmt.Errorf("debootstrap %s: %w\n%s", strings.Join(args, " "), err, tail(out.Bytes(), 3000))
	}
	return umountErr
}

// finishRootfs drops the downloaded packages and writes the stamp.
func finishRootfs(root, stamp string) error {
	debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		if err := os.Remove(d); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(root, stampFile), []byte(stamp), 0o644)
}

// replaceDir moves the finished tree tmp to dir, replacing an old tree.
func replaceDir(tmp, dir string) error {
	old := ""
	if exists(dir) {
		old = fmt.Sprintf("%s.tmp-old-%s", dir, randomHex(4))
		if err := os.Rename(dir, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	if old != "" {
		return removeTree(old)
	}
	return nil
}

// removeStaleBuilds removes the temporary trees of interrupted builds; the
// caller holds the build lock, so none of them is in progress.
func removeStaleBuilds(dir string) error {
	stale, err := filepath.Glob(dir + ".tmp-*")
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range stale {
		errs = append(errs, removeTree(s))
	}
	return errors.Join(errs...)
}

// lockFile takes an exclusive flock on path, waiting until ctx is done.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func logf(f func(string, ...any), format string, args ...any) {
	if f != nil {
		f(format, args...)
	}
}
