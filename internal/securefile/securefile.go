// Package securefile reads files that hold secrets or settings a root
// daemon trusts, checking on the opened file (not a separate stat of the
// path) who owns it and who else may change or read it.
package securefile

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxSize bounds what Read reads: a configuration or a password is a few
// kilobytes at most.
const MaxSize = 1 << 20

// Read opens path and returns its contents if the file is a regular file
// owned by root (or by the user running this process), not writable by
// group or others and, with secret, neither readable by them. The checks
// are made on the open file, so a file swapped between check and read is
// never read.
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
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxSize)
	}
	return data, nil
}
