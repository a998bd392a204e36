package unitctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Links is what one pass over systemd's unit directories found of
// symbolic links, so that validation need not have systemd work out each
// unit's UnitFileState.
//
// systemd works a unit's UnitFileState out on every read of a unit not
// loaded (every inactive one) by reading all of its unit directories,
// and the .wants/, .requires/ and .upholds/ directories in them, for
// links to the unit: each read costs in proportion to the number of
// units, and a discovery of N units costs N² (at 5,000 units on a
// container's overlay root, validation kept systemd busy for a minute,
// most of it reading directories). One pass here reads them all once.
//
// A unit is enabled or linked (enabled, enabled-runtime, linked,
// linked-runtime: the states validation refuses) only through a symbolic
// link in one of those directories that is named after the unit, points
// to a file of the unit's name, or leads to the unit's file. Links keeps
// all three of every link it finds, in every directory of the unit path
// and in every directory within them but drop-in directories (*.d, which
// systemd never reads for links), and the name and file of every other
// file in those directories within: more than systemd looks at, never
// less. A unit that no link found can be tied to has none of those
// states; for any other unit validation asks systemd, as it always did.
type Links struct {
	names map[string]bool // each link's name, and the last element of what it points to
	files map[fileID]bool // the file each link leads to in the end
	dirs  []string        // the directories read, systemd's UnitPath
}

type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, true
}

// ScanLinks reads systemd's unit path (the manager's UnitPath) and every
// link in it. An error means validation reads each unit's UnitFileState
// from systemd.
func (s *Systemd) ScanLinks(ctx context.Context) (*Links, error) {
	v, err := s.managerProperty(ctx, "UnitPath")
	if err != nil {
		return nil, err
	}
	path, ok := v.Value().([]string)
	if !ok {
		return nil, fmt.Errorf("unitctl: the manager's UnitPath is %v", v)
	}
	return scanLinks(path)
}

// scanLinks reads the links in dirs and in the directories within them
// (but *.d), following a link to a directory too.
func scanLinks(dirs []string) (*Links, error) {
	l := &Links{names: map[string]bool{}, files: map[fileID]bool{}, dirs: dirs}
	for _, dir := range dirs {
		if err := l.read(dir, true); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (l *Links) read(dir string, top bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || !top && errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unitctl: read the unit directory %s: %w", dir, err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		isLink := e.Type()&fs.ModeSymlink != 0
		switch {
		case isLink:
			if err := l.add(path); err != nil {
				return err
			}
		case !top && !e.IsDir():
			// systemd reads only links here; a file counts too, by its
			// name and what it is
			l.names[e.Name()] = true
			if fi, err := os.Stat(path); err == nil {
				if id, ok := idOf(fi); ok {
					l.files[id] = true
				}
			}
		}
		if !top || strings.HasSuffix(e.Name(), ".d") {
			continue
		}
		if e.IsDir() {
			if err := l.read(path, false); err != nil {
				return err
			}
			continue
		}
		if isLink {
			if fi, err := os.Stat(path); err == nil && fi.IsDir() {
				if err := l.read(path, false); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// add keeps the link at path: its name, the last element of what it
// points to, and the file it leads to in the end (none if it dangles).
func (l *Links) add(path string) error {
	l.names[filepath.Base(path)] = true
	target, err := os.Readlink(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // gone since the directory was read
	}
	if err != nil {
		return fmt.Errorf("unitctl: read the link %s: %w", path, err)
	}
	l.names[filepath.Base(target)] = true
	if fi, err := os.Stat(path); err == nil {
		if id, ok := idOf(fi); ok {
			l.files[id] = true
		}
	}
	return nil
}

// mayTie reports whether a link found may make a unit enabled or linked:
// one is named after one of names (the unit's names; a template's
// instance also by its template's name), or points to a file of such a
// name, or leads to the file at fragment. It is true when there is no
// name, no fragment, or it cannot be read.
func (l *Links) mayTie(names []string, fragment string) bool {
	if !slices.ContainsFunc(names, func(n string) bool { return n != "" }) {
		return true // no name to look for: systemd knows
	}
	for _, n := range names {
		if l.names[n] || l.names[templateOf(n)] {
			return true
		}
	}
	if fragment == "" {
		return true // not from a file: systemd knows
	}
	fi, err := os.Stat(fragment)
	if err != nil {
		return true
	}
	id, ok := idOf(fi)
	return !ok || l.files[id]
}

// templateOf is the template of an instance's name (foo@bar.service:
// foo@.service), or name itself.
func templateOf(name string) string {
	at := strings.IndexByte(name, '@')
	dot := strings.LastIndexByte(name, '.')
	if at < 0 || dot < at {
		return name
	}
	return name[:at+1] + name[dot:]
}
