//go:build linux

package vmtests

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mountInfo is one line of /proc/self/mountinfo, reduced to what the
// harness needs.
type mountInfo struct {
	point  string
	fstype string
	opts   string // super block options
}

func readMountInfo() ([]mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if m, ok := parseMountInfo(sc.Text()); ok {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

// parseMountInfo parses "ID PARENT MAJ:MIN ROOT POINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS".
func parseMountInfo(line string) (mountInfo, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return mountInfo{}, false
	}
	a, b := strings.Fields(pre), strings.Fields(post)
	if len(a) < 5 || len(b) < 3 {
		return mountInfo{}, false
	}
	return mountInfo{point: unescapeOctal(a[4]), fstype: b[0], opts: b[2]}, true
}

// unescapeOctal undoes the \040-style escapes of /proc/self/mountinfo.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				sb.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	all, err := readMountInfo()
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, m := range all {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unmountAllUnder unmounts every mount at or below dir, deepest first. A
// mount that stays busy for a few seconds is detached lazily.
func unmountAllUnder(dir string) error {
	for range 10 {
		points, err := mountsUnder(dir)
		if err != nil || len(points) == 0 {
			return err
		}
		for _, p := range points {
			unmount(p)
		}
	}
	if points, _ := mountsUnder(dir); len(points) > 0 {
		return fmt.Errorf("mounts remain under %s: %v", dir, points)
	}
	return nil
}

func unmount(point string) {
	for range 50 {
		err := syscall.Unmount(point, 0)
		if err == nil || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
			return
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Unmount(point, syscall.MNT_DETACH)
}

// removeTree unmounts everything below dir and then removes it. It refuses
// to remove anything while a mount remains below dir, so that a bind mount
// of a host directory is never deleted through.
func removeTree(dir string) error {
	if err := unmountAllUnder(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// mountOverlay mounts an overlay of lower (read-only) and upper at merged.
func mountOverlay(lower, upper, work, merged string) error {
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := syscall.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay at %s (%s): %w", merged, opts, err)
	}
	return nil
}
