// Package securefile reads files that hold secrets or settings a root
// daemon trusts, checking on the opened file (not a separate stat of the
// path) who owns it and who else may change or read it.
package securefile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// MaxSize bounds what Read reads: a configuration or a password is a few
// kilobytes at most.
const MaxSize = 1 << 20

// Read opens path and returns its contents if the file is a regular file
// owned by root (or by the user running this process), not writable by
// group or others and, with secret, neither readable by them. The checks
// are made on the open file, so a file swapped between check and read is
// never read. The path must be root's too (Trusted): a file root owns,
// reached through a directory or a symlink another user controls, is
// whatever file that user chose.
func Read(path string, secret bool) ([]byte, error) {
	// Not blocking (a FIFO would hang the open), never a controlling
	// terminal: nothing is read before the checks on the open file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	perm := st.Mode().Perm()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if uid := int(sys.Uid); uid != 0 && uid != os.Geteuid() {
			return nil, fmt.Errorf("%s is owned by uid %d, not root: another user could change it; chown root %s", path, uid, path)
		}
	}
	switch {
	case secret && perm&0o077 != 0:
		return nil, fmt.Errorf("%s: mode %04o lets group or others read or change it; chmod 0600 %s", path, perm, path)
	case perm&0o022 != 0:
		return nil, fmt.Errorf("%s: mode %04o lets group or others change it; chmod go-w %s", path, perm, path)
	}
	walked, err := resolve(path)
	if err != nil {
		return nil, err
	}
	// The walk must have reached the file that was opened: the same
	// inode (a path that changed between the open and the walk is
	// refused, not guessed at).
	if ws, err := os.Stat(walked); err != nil || !os.SameFile(ws, st) {
		return nil, fmt.Errorf("%s: changed while it was read; try again", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxSize)
	}
	return data, nil
}

// maxLinks bounds the symlinks one path may pass through (the kernel's
// own limit).
const maxLinks = 40

// Trusted checks that only root (or the user running this process) can
// change what path names: every directory it passes through, from /, is
// owned by root and not writable by group or others (a sticky directory,
// such as /tmp, may be: there only an entry's owner may replace it), and
// every symlink it follows is root's, the directories of its target
// checked the same way. The path is resolved as the kernel does: a ".."
// goes up from the directory a symlink led to, not from the symlink.
func Trusted(path string) error {
	_, err := resolve(path)
	return err
}

// resolve walks path, checking it as Trusted says, and returns the path
// it resolves to.
func resolve(path string) (string, error) {
	abs := path
	if !filepath.IsAbs(abs) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		abs = wd + "/" + abs // not Join: that would take a ".." lexically
	}
	links := 0
	return walk(path, abs, &links)
}

func walk(path, p string, links *int) (string, error) {
	parts := strings.Split(p, "/")
	cur := "/" // resolved: no symlink in it
	if err := dir(path, cur); err != nil {
		return "", err
	}
	for i, part := range parts {
		switch part {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // cur is resolved: its parent is the kernel's
			continue
		}
		next := filepath.Join(cur, part)
		st, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			if err := owned(path, next, st, "symlink"); err != nil {
				return "", err
			}
			if *links++; *links > maxLinks {
				return "", fmt.Errorf("%s: more than %d symlinks", path, maxLinks)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", err
			}
			if !filepath.IsAbs(target) {
				target = cur + "/" + target
			}
			return walk(path, target+"/"+strings.Join(parts[i+1:], "/"), links)
		}
		if last(parts[i+1:]) {
			return next, nil
		}
		if err := dir(path, next); err != nil {
			return "", err
		}
		cur = next
	}
	return cur, nil
}

// last reports whether rest names nothing more (empty parts and "." only).
func last(rest []string) bool {
	for _, p := range rest {
		if p != "" && p != "." {
			return false
		}
	}
	return true
}

// dir checks one directory path passes through.
func dir(path, d string) error {
	st, err := os.Stat(d)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", path, d)
	}
	if err := owned(path, d, st, "directory"); err != nil {
		return err
	}
	if perm := st.Mode(); perm.Perm()&0o022 != 0 && perm&os.ModeSticky == 0 {
		return fmt.Errorf("%s: directory %s has mode %04o: group or others could put another file in its place; chmod go-w %s", path, d, perm.Perm(), d)
	}
	return nil
}

// owned checks that root (or this process's user) owns what is at p.
func owned(path, p string, st os.FileInfo, what string) error {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if uid := int(sys.Uid); uid != 0 && uid != os.Geteuid() {
			return fmt.Errorf("%s: %s %s is owned by uid %d, not root: that user could put another file in its place", path, what, p, uid)
		}
	}
	return nil
}
