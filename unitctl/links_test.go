package unitctl

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLinksTieEveryWayAUnitCanBeEnabled builds a unit path with a unit
// enabled or linked each way systemd knows (a link in a .wants/,
// .requires/ or .upholds/ directory by the unit's name, an alias, a
// linked unit file, a link through another link, a link under another
// name to the unit's file, a template's instance), and units that
// nothing ties. Each tied unit must be one the scan cannot rule out (so
// validation asks systemd); each untied one must be ruled out, whatever
// else the directories hold: drop-in directories, a dangling link, a
// file in a .wants/ directory under another name.
func TestLinksTieEveryWayAUnitCanBeEnabled(t *testing.T) {
	root := t.TempDir()
	etc, run, lib, opt := filepath.Join(root, "etc"), filepath.Join(root, "run"), filepath.Join(root, "lib"), filepath.Join(root, "opt")
	file := func(path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("[Service]\nExecStart=/bin/true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	link := func(target, path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	frag := map[string]string{}
	for _, u := range []string{"copied", "wanted", "required", "upheld", "runtime", "aliased", "chained", "renamed", "plain", "other", "dropins"} {
		frag[u+".service"] = file(filepath.Join(etc, u+".service"))
	}
	frag["tmpl@.service"] = file(filepath.Join(lib, "tmpl@.service"))
	frag["lonely@.service"] = file(filepath.Join(lib, "lonely@.service"))
	frag["linked.service"] = filepath.Join(etc, "linked.service")
	link(file(filepath.Join(opt, "linked.service")), frag["linked.service"])

	link("../wanted.service", filepath.Join(etc, "multi-user.target.wants", "wanted.service"))
	link(frag["required.service"], filepath.Join(etc, "x.target.requires", "required.service"))
	link(frag["upheld.service"], filepath.Join(lib, "y.target.upholds", "upheld.service"))
	link(frag["runtime.service"], filepath.Join(run, "multi-user.target.wants", "runtime.service"))
	link("aliased.service", filepath.Join(etc, "alias-name.service"))
	link(filepath.Join(opt, "hop.service"), filepath.Join(etc, "z.target.wants", "hop.service"))
	link(frag["chained.service"], filepath.Join(opt, "hop.service"))
	// another name for the same file: only the file it leads to ties it
	if err := os.Link(frag["renamed.service"], filepath.Join(opt, "hard.service")); err != nil {
		t.Fatal(err)
	}
	link(filepath.Join(opt, "hard.service"), filepath.Join(etc, "w.target.wants", "hard.service"))
	link("../tmpl@.service", filepath.Join(etc, "multi-user.target.wants", "tmpl@one.service"))
	// things that tie nothing
	file(filepath.Join(run, "plain.service.d", "50-unitlease.conf"))
	link(frag["dropins.service"], filepath.Join(run, "dropins.service.d", "dropins.service"))
	link(filepath.Join(opt, "gone.service"), filepath.Join(etc, "dangling.service"))
	file(filepath.Join(etc, "multi-user.target.wants", "notes.txt"))
	// a copy, not a link, in a .wants/ directory: systemd ignores it, the
	// scan does not
	file(filepath.Join(etc, "v.target.wants", "copied.service"))
	// a unit path may name directories that do not exist
	links, err := scanLinks([]string{filepath.Join(root, "nothing"), etc, run, lib})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		names []string
		tied  bool
	}{
		{[]string{"wanted.service"}, true},
		{[]string{"required.service"}, true},
		{[]string{"upheld.service"}, true},
		{[]string{"runtime.service"}, true},
		{[]string{"aliased.service"}, true},
		{[]string{"chained.service"}, true},
		{[]string{"renamed.service"}, true},
		{[]string{"linked.service"}, true},
		{[]string{"tmpl@two.service"}, true},
		{[]string{"copied.service"}, true},
		{[]string{"plain.service"}, false},
		{[]string{"other.service"}, false},
		{[]string{"dropins.service"}, false},
		{[]string{"lonely@one.service"}, false},
	} {
		f := frag[c.names[0]]
		if f == "" {
			f = frag[templateOf(c.names[0])]
		}
		if got := links.mayTie(c.names, f); got != c.tied {
			t.Errorf("%s: mayTie = %v, want %v", c.names[0], got, c.tied)
		}
	}
	// A unit known by a second name is tied by a link to that one.
	if !links.mayTie([]string{"plain.service", "alias-name.service"}, frag["plain.service"]) {
		t.Error("plain.service with the name alias-name.service: not tied, want tied")
	}
	// No file, or one that cannot be read: systemd is asked.
	if !links.mayTie([]string{"plain.service"}, "") || !links.mayTie([]string{"plain.service"}, filepath.Join(root, "missing.service")) {
		t.Error("a unit without a readable file was ruled out")
	}
}

// TestLinksUnreadableUnitPathIsAnError: a unit directory that exists but
// cannot be read fails the scan (validation then asks systemd for each
// unit) rather than ruling anything out.
func TestLinksUnreadableUnitPathIsAnError(t *testing.T) {
	f := filepath.Join(t.TempDir(), "not-a-directory")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := scanLinks([]string{f}); err == nil {
		t.Fatal("scanLinks of a file as a unit directory: no error")
	}
}

func TestTemplateOf(t *testing.T) {
	for in, want := range map[string]string{
		"foo@bar.service": "foo@.service", "foo@.service": "foo@.service", "foo.service": "foo.service",
		"a@b.c@d.socket": "a@.socket",
	} {
		if got := templateOf(in); got != want {
			t.Errorf("templateOf(%q) = %q, want %q", in, got, want)
		}
	}
}
