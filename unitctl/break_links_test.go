package unitctl

// Attacks on the links scan (scanLinks, Links.mayTie) without systemd:
// whatever systemd 252's install.c (find_symlinks_in_scope,
// find_symlinks, find_symlinks_in_directory) would count as a link to a
// unit, the scan must count too, or validation skips a UnitFileState of
// enabled or linked.

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// brkTemplate is unit_name_template: foo@bar.service is foo@.service,
// "" for a name that is no instance or template.
func brkTemplate(name string) string {
	at := strings.IndexByte(name, '@')
	dot := strings.LastIndexByte(name, '.')
	if at < 0 || dot < at {
		return ""
	}
	return name[:at+1] + name[dot:]
}

// brkSystemdFinds models, generously, which links systemd 252 counts
// when it works out the UnitFileState of unit (unit_file_lookup_state
// with info->name = unit): in every directory of the unit path (opened
// through a symlink), the links (DT_LNK) in its subdirectories that are
// directories (DT_DIR, not a link to one) whose name's last dot starts
// .wants, .requires or .upholds, and the links in the directory itself;
// a link counts if its name is unit, its name's template is unit, or the
// part of its target after the last slash (basename(), "" for a target
// ending in a slash) is unit. systemd looks at the target only in the
// directory itself and at the template only in the subdirectories; this
// model counts both everywhere, which only asks more of the scan.
func brkSystemdFinds(dirs []string, unit string) (string, bool) {
	matches := func(dir string, e fs.DirEntry) bool {
		if e.Type()&fs.ModeSymlink == 0 {
			return false
		}
		if e.Name() == unit || brkTemplate(e.Name()) == unit {
			return true
		}
		dest, err := os.Readlink(filepath.Join(dir, e.Name()))
		return err == nil && dest[strings.LastIndexByte(dest, '/')+1:] == unit
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if matches(dir, e) {
				return filepath.Join(dir, e.Name()), true
			}
			i := strings.LastIndexByte(e.Name(), '.')
			if !e.IsDir() || i < 0 {
				continue
			}
			switch e.Name()[i:] {
			case ".wants", ".requires", ".upholds":
			default:
				continue
			}
			sub := filepath.Join(dir, e.Name())
			subEntries, err := os.ReadDir(sub)
			if err != nil {
				continue
			}
			for _, f := range subEntries {
				if matches(sub, f) {
					return filepath.Join(sub, f.Name()), true
				}
			}
		}
	}
	return "", false
}

type brkFS struct {
	t    *testing.T
	root string
}

func (b brkFS) file(path string) string {
	b.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("[Service]\nExecStart=/bin/true\n"), 0o644); err != nil {
		b.t.Fatal(err)
	}
	return path
}

func (b brkFS) link(target, path string) {
	b.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		b.t.Fatal(err)
	}
}

// TestBreakLinksOddLinks: links that systemd counts by their name or
// their target's last element alone, whatever they lead to: a dangling
// link, one to /dev/null, to a directory, to a file of another name, a
// relative target through .. and ., a loop; in .wants/, .requires/,
// .upholds/ and at the top; a unit directory of the unit path that is a
// link itself; a .wants/ directory named oddly (".wants", "a.b.wants").
// Each unit must be tied, its file (never linked) notwithstanding.
func TestBreakLinksOddLinks(t *testing.T) {
	b := brkFS{t, t.TempDir()}
	etc, run, lib, real, opt := filepath.Join(b.root, "etc"), filepath.Join(b.root, "run"), filepath.Join(b.root, "lib"), filepath.Join(b.root, "real"), filepath.Join(b.root, "opt")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	b.link(real, run) // the unit directory /run... is a link
	b.link("/nowhere/x.service", filepath.Join(etc, "multi-user.target.wants", "dangling.service"))
	b.link("/dev/null", filepath.Join(etc, "multi-user.target.wants", "null.service"))
	b.link(opt, filepath.Join(etc, "multi-user.target.wants", "dir.service"))
	b.link(b.file(filepath.Join(opt, "other.service")), filepath.Join(etc, "multi-user.target.requires", "renamed.service"))
	b.link("../../etc/./x/../rel.service", filepath.Join(etc, "a.target.upholds", "rel.service"))
	b.link("loop.service", filepath.Join(etc, "z.target.wants", "loop.service"))
	b.link("../x.target.wants/target-only.service", filepath.Join(etc, "alias-top.service")) // top: by target
	b.link(filepath.Join(opt, "slash.service")+"/", filepath.Join(etc, "slash-top.service"))
	b.link("/dev/null", filepath.Join(real, "multi-user.target.wants", "via-run.service"))
	b.link("/dev/null", filepath.Join(lib, ".wants", "dotwants.service"))
	b.link("/dev/null", filepath.Join(lib, "a.b.wants", "abwants.service"))
	b.link("/dev/null", filepath.Join(lib, "x.service.wants", "unitwants.service"))
	b.link("/dev/null", filepath.Join(lib, "multi-user.target.wants", "inst@x.service"))
	b.link("../t@.service", filepath.Join(lib, "multi-user.target.wants", "other@y.service")) // instance of another template
	b.link("/dev/null", filepath.Join(lib, "y.target.wants", "tmpl@.service"))                // a template enabled by name
	dirs := []string{filepath.Join(b.root, "missing"), etc, run, lib}
	links, err := scanLinks(dirs)
	if err != nil {
		t.Fatal(err)
	}
	unlinked := b.file(filepath.Join(b.root, "elsewhere", "unit.service")) // a fragment no link leads to
	for _, unit := range []string{"dangling.service", "null.service", "dir.service", "renamed.service", "rel.service", "loop.service",
		"target-only.service", "alias-top.service", "slash.service", "slash-top.service", "via-run.service", "dotwants.service",
		"abwants.service", "unitwants.service", "inst@x.service", "other@y.service", "tmpl@z.service"} {
		where, systemd := brkSystemdFinds(dirs, unit)
		tie := links.mayTie([]string{unit}, unlinked)
		if systemd && !tie {
			t.Errorf("%s: systemd counts the link %s, mayTie = false", unit, where)
		}
		if !tie {
			t.Logf("%s: not tied (systemd counts it: %v)", unit, systemd)
		}
	}
}

// TestBreakLinksRandomTrees builds random trees of unit directories
// (directories within them with every kind of name, nested ones, links
// to directories, unit directories that are links), with links named
// after units, instances and templates, to files, other links,
// directories, /dev/null, nothing, by absolute and relative paths with
// . and .. and trailing slashes, and checks every name: where the model
// of systemd's reading (brkSystemdFinds) finds a link to the unit,
// mayTie must tie it.
func TestBreakLinksRandomTrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(252, 1))
	units := []string{"a.service", "b.service", "c.socket", "t@x.service", "t@y.service", "u@x.service", "d.service"}
	names := append([]string{"t@.service", "u@.service", "zz.service", "e.target"}, units...)
	subs := []string{"multi-user.target.wants", "x.target.requires", "x.target.upholds", ".wants", "a.b.wants",
		"a.service.d", "a.service.wants.d", "notes", "x.wants.old", "t@.service.wants", "deep"}
	found, tiedExtra := 0, 0
	for round := range 400 {
		b := brkFS{t, t.TempDir()}
		var tops []string
		for i := range 1 + rng.IntN(3) {
			tops = append(tops, filepath.Join(b.root, fmt.Sprintf("top%d", i)))
		}
		outside := filepath.Join(b.root, "outside")
		var files, made []string
		for range 2 + rng.IntN(4) {
			dir := outside
			if rng.IntN(3) > 0 {
				dir = tops[rng.IntN(len(tops))]
			}
			p := filepath.Join(dir, names[rng.IntN(len(names))])
			if _, err := os.Lstat(p); err != nil {
				files = append(files, b.file(p))
			}
		}
		if rng.IntN(4) == 0 { // a unit directory that is a link to another directory
			real := filepath.Join(b.root, "real")
			if err := os.MkdirAll(real, 0o755); err == nil {
				p := filepath.Join(b.root, "linked-top")
				b.link(real, p)
				tops = append(tops, p)
				made = append(made, "unit directory "+p+" -> "+real)
			}
		}
		for range 2 + rng.IntN(8) {
			dir := tops[rng.IntN(len(tops))]
			switch rng.IntN(4) {
			case 0:
			case 1:
				dir = outside
			default:
				dir = filepath.Join(dir, subs[rng.IntN(len(subs))])
				if rng.IntN(6) == 0 {
					dir = filepath.Join(dir, subs[rng.IntN(len(subs))])
				}
			}
			if rng.IntN(8) == 0 { // a subdirectory that is a link to a directory
				sub := filepath.Join(tops[rng.IntN(len(tops))], subs[rng.IntN(len(subs))])
				if _, err := os.Lstat(sub); err != nil {
					if err := os.MkdirAll(outside, 0o755); err == nil {
						b.link(outside, sub)
						made = append(made, "directory link "+sub+" -> "+outside)
					}
				}
			}
			name := names[rng.IntN(len(names))]
			var target string
			switch k := rng.IntN(9); {
			case k < 4 && len(files) > 0:
				target = files[rng.IntN(len(files))]
				if rng.IntN(2) == 0 {
					if rel, err := filepath.Rel(dir, target); err == nil {
						target = rel
					}
				}
				switch rng.IntN(4) {
				case 0:
					target += "/"
				case 1:
					target = filepath.Dir(target) + "/./" + filepath.Base(target)
				}
			case k < 5:
				target = "/dev/null"
			case k < 6:
				target = names[rng.IntN(len(names))]
			case k < 7:
				target = filepath.Join(b.root, "gone", names[rng.IntN(len(names))])
			case k < 8:
				target = tops[rng.IntN(len(tops))]
			default:
				target = "../" + names[rng.IntN(len(names))]
			}
			p := filepath.Join(dir, name)
			if _, err := os.Lstat(p); err == nil {
				continue
			}
			if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
				continue
			}
			b.link(target, p)
			made = append(made, p+" -> "+target)
		}
		links, err := scanLinks(tops)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		unlinked := b.file(filepath.Join(b.root, "never-linked", "unit.service"))
		for _, unit := range units {
			where, systemd := brkSystemdFinds(tops, unit)
			tie := links.mayTie([]string{unit}, unlinked)
			if systemd {
				found++
			} else if tie {
				tiedExtra++
			}
			if systemd && !tie {
				t.Errorf("round %d: %s: systemd counts %s, mayTie = false\n  %s", round, unit, where, strings.Join(made, "\n  "))
			}
		}
	}
	t.Logf("names systemd counts a link for: %d; tied without one: %d", found, tiedExtra)
	if found == 0 {
		t.Error("no tree had a link systemd counts: the test tests nothing")
	}
}

// TestBreakLinksNamesAreAll: mayTie is given the unit's Names, which
// systemd always reports with the Id among them. Given no names (were
// Names ever left out of the read: unitPropsHeld drops a property systemd
// reports unknown), it would tie a unit only by its file, and miss a link
// named after the unit to a file of another name: so no names ties.
func TestBreakLinksNamesAreAll(t *testing.T) {
	b := brkFS{t, t.TempDir()}
	etc := filepath.Join(b.root, "etc")
	frag := b.file(filepath.Join(etc, "u.service"))
	b.link("/dev/null", filepath.Join(etc, "multi-user.target.wants", "u.service"))
	links, err := scanLinks([]string{etc})
	if err != nil {
		t.Fatal(err)
	}
	if !links.mayTie([]string{"u.service"}, frag) {
		t.Error("u.service with its name: not tied")
	}
	if !links.mayTie(nil, frag) {
		t.Error("u.service without its names (Names missing from the read): not tied, want tied (systemd asked)")
	}
}
