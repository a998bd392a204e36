package unitctl

// Attacks on the links scan (ScanLinks, Links.mayTie) and on the read
// that skips UnitFileState (readSettingsKnowing) against a real systemd:
// every unit that systemd reports enabled, enabled-runtime, linked or
// linked-runtime must be one that mayTie cannot rule out, and Validate
// with the scan must refuse it.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// brkFreshState is the manager's GetUnitFileState(name): systemd works it
// out anew on every call (unit_file_get_state), unlike the unit's
// UnitFileState property, which it keeps once worked out.
func brkFreshState(ctx context.Context, s *Systemd, name string) (string, error) {
	var st string
	err := s.with(ctx, func(c *sd.Conn) error {
		bus, err := s.busOf(c)
		if err != nil {
			return err
		}
		return bus.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
			CallWithContext(ctx, "org.freedesktop.systemd1.Manager.GetUnitFileState", 0, name).Store(&st)
	})
	return st, err
}

// brkAll is one GetAll of every interface of unit: what validation
// without a scan reads.
func brkAll(ctx context.Context, s *Systemd, unit string) (map[string]any, error) {
	var props map[string]any
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		props, err = s.allProperties(ctx, c, unit)
		return err
	})
	return props, err
}

// brkHeld reads Names and FragmentPath, what readSettingsKnowing gives
// mayTie (it reads them with the unit held; the values are the same).
func brkHeld(ctx context.Context, s *Systemd, unit string) (names []string, fragment string, err error) {
	n, err := s.unitProperty(ctx, unit, "Names")
	if err != nil {
		return nil, "", err
	}
	f, err := s.unitProperty(ctx, unit, "FragmentPath")
	if err != nil {
		return nil, "", err
	}
	names, _ = n.Value().([]string)
	fragment, _ = f.Value().(string)
	return names, fragment, nil
}

func brkEnabled(state string) bool { return slices.Contains(enabledStates, state) }

// brkUnitPath is the manager's UnitPath.
func brkUnitPath(ctx context.Context, t *testing.T, s *Systemd) []string {
	t.Helper()
	var path []string
	err := s.with(ctx, func(c *sd.Conn) error {
		bus, err := s.busOf(c)
		if err != nil {
			return err
		}
		var v dbus.Variant
		if err := bus.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
			CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, "org.freedesktop.systemd1.Manager", "UnitPath").Store(&v); err != nil {
			return err
		}
		path, _ = v.Value().([]string)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// brkGenerators are systemd's generator directories (system manager).
var brkGenerators = []string{"/run/systemd/generator.early", "/run/systemd/generator", "/run/systemd/generator.late"}

// brkOutside is a directory outside the unit path, for linked unit files
// and links through several hops.
const brkOutside = "/opt/ul-brk"

// brkSweep removes every file, link and directory whose name, or whose
// link target, contains marker, from the unit path's directories (and
// the directories within them), the generator directories and
// brkOutside; then reloads systemd and stops what is left of marker's
// units.
func brkSweep(dirs []string, marker string) {
	all := append(slices.Clone(dirs), brkGenerators...)
	for _, dir := range all {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if strings.Contains(e.Name(), marker) {
				os.RemoveAll(p)
				continue
			}
			if target, err := os.Readlink(p); err == nil {
				if strings.Contains(target, marker) {
					os.Remove(p)
				}
				continue
			}
			if !e.IsDir() {
				continue
			}
			sub, _ := os.ReadDir(p)
			for _, f := range sub {
				q := filepath.Join(p, f.Name())
				target, _ := os.Readlink(q)
				if strings.Contains(f.Name(), marker) || strings.Contains(target, marker) {
					os.RemoveAll(q)
				}
			}
			if rest, err := os.ReadDir(p); err == nil && len(rest) == 0 && (strings.HasPrefix(e.Name(), "multi-user.target.") || strings.Contains(e.Name(), marker)) {
				os.Remove(p) // an empty .wants/ this made (multi-user.target.wants is never empty)
			}
		}
	}
	os.RemoveAll(brkOutside)
	systemctlQuiet("daemon-reload")
	systemctlQuiet("stop", marker+"*")
	systemctlQuiet("reset-failed", marker+"*")
}

// brkWorld builds one layout of unit files and links and records what it
// did, to print it when a check fails.
type brkWorld struct {
	t      *testing.T
	rng    *rand.Rand
	marker string
	tops   []string // the unit path but the generator directories
	files  []string // unit files written
	links  []string // links made
	log    []string
	// names the checks read: plain names, instances, names that only
	// links or aliases give
	plain, templates, instances, others []string
}

func (w *brkWorld) note(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *brkWorld) pick(list []string) string { return list[w.rng.IntN(len(list))] }

func (w *brkWorld) write(path, text string) {
	if _, err := os.Lstat(path); err == nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		w.t.Fatal(err)
	}
	w.files = append(w.files, path)
	w.note("file %s:\n%s", path, strings.TrimSpace(text))
}

func (w *brkWorld) symlink(target, path string) {
	if _, err := os.Lstat(path); err == nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		w.t.Fatal(err)
	}
	w.links = append(w.links, path)
	w.note("link %s -> %s", path, target)
}

func (w *brkWorld) systemctl(args ...string) {
	out, err := exec.Command("systemctl", args...).CombinedOutput()
	w.note("systemctl %s: %v %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
}

// newBrkWorld makes the names of one round.
func newBrkWorld(t *testing.T, rng *rand.Rand, round int, tops []string) *brkWorld {
	m := fmt.Sprintf("ul-brkr%d-", round)
	w := &brkWorld{t: t, rng: rng, marker: m, tops: tops}
	for i := range 4 {
		w.plain = append(w.plain, fmt.Sprintf("%sp%d.service", m, i))
	}
	for i := range 2 {
		w.templates = append(w.templates, fmt.Sprintf("%st%d@.service", m, i))
		for _, inst := range []string{"x", "y", "dflt"} {
			w.instances = append(w.instances, fmt.Sprintf("%st%d@%s.service", m, i, inst))
		}
	}
	w.others = []string{m + "zz.service", m + "t9@x.service", m + "t9@.service"}
	return w
}

// randomUnits writes the unit files: each plain unit and template in a
// random directory of the unit path or outside it, with a random
// [Install] section.
func (w *brkWorld) randomUnits() {
	target := w.marker + "tgt.target"
	for _, name := range append(slices.Clone(w.plain), w.templates...) {
		dir := brkOutside
		if w.rng.IntN(5) > 0 {
			dir = w.pick(w.tops)
		}
		text := plainService
		var install []string
		for range w.rng.IntN(4) {
			switch w.rng.IntN(7) {
			case 0, 1:
				install = append(install, "WantedBy="+w.pick([]string{"multi-user.target", target}))
			case 2:
				install = append(install, "RequiredBy="+target)
			case 3:
				install = append(install, "UpheldBy="+target)
			case 4:
				if strings.Contains(name, "@") {
					install = append(install, "Alias="+w.pick(append(slices.Clone(w.templates), w.marker+"t9@.service")))
				} else {
					install = append(install, "Alias="+w.pick(append(slices.Clone(w.plain), w.marker+"zz.service")))
				}
			case 5:
				if strings.Contains(name, "@") {
					install = append(install, "DefaultInstance=dflt")
				}
			case 6:
				install = append(install, "Also="+w.pick(w.plain))
			}
		}
		if len(install) > 0 {
			text += "\n[Install]\n" + strings.Join(install, "\n") + "\n"
		}
		w.write(filepath.Join(dir, name), text)
		if w.rng.IntN(4) == 0 { // another copy, in a directory before or after
			w.write(filepath.Join(w.pick(w.tops), name), text)
		}
	}
}

// randomLink makes one link by hand: in a directory of the unit path (or
// one of the directories within: .wants/, .requires/, .upholds/, a
// drop-in directory, something else), or in the generator directories
// when after is set; named after a unit of the round (any name); to a
// unit file, another link, /dev/null, nothing, a directory, by an
// absolute or a relative path.
func (w *brkWorld) randomLink(after bool) {
	dir := w.pick(w.tops)
	if after {
		dir = w.pick(append(slices.Clone(brkGenerators), w.tops...))
	}
	if w.rng.IntN(3) == 0 {
		dir = brkOutside
	}
	subs := []string{"", "", "multi-user.target.wants", "multi-user.target.wants", w.marker + "tgt.target.wants",
		w.marker + "tgt.target.requires", w.marker + "tgt.target.upholds", w.plain[0] + ".wants", w.plain[1] + ".d", w.marker + "x"}
	if dir != brkOutside {
		dir = filepath.Join(dir, w.pick(subs))
	}
	names := slices.Concat(w.plain, w.plain, w.instances, w.templates, w.others)
	name := w.pick(names)
	var candidates []string
	candidates = append(candidates, w.files...)
	candidates = append(candidates, w.links...)
	var target string
	switch k := w.rng.IntN(10); {
	case k < 6 && len(candidates) > 0:
		target = w.pick(candidates)
		if w.rng.IntN(2) == 0 {
			if rel, err := filepath.Rel(dir, target); err == nil {
				target = rel
			}
		}
	case k < 7:
		target = "/dev/null"
	case k < 8:
		target = filepath.Join(brkOutside, "gone-"+w.pick(names))
	case k < 9:
		target = w.pick(names) // a bare name: the same directory
	default:
		target = w.pick(w.tops) + "/"
	}
	w.symlink(target, filepath.Join(dir, name))
}

// randomSystemctl has systemctl enable, link, mask or add-wants
// something, without a reload.
func (w *brkWorld) randomSystemctl() {
	runtime := []string{}
	if w.rng.IntN(3) == 0 {
		runtime = []string{"--runtime"}
	}
	names := slices.Concat(w.plain, w.instances, w.templates)
	switch w.rng.IntN(6) {
	case 0, 1, 2:
		w.systemctl(slices.Concat([]string{"enable", "--no-reload"}, runtime, []string{w.pick(names)})...)
	case 3:
		var outside []string
		for _, f := range w.files {
			if strings.HasPrefix(f, brkOutside+"/") {
				outside = append(outside, f)
			}
		}
		if len(outside) > 0 {
			w.systemctl(slices.Concat([]string{"link", "--no-reload"}, runtime, []string{w.pick(outside)})...)
		}
	case 4:
		w.systemctl(slices.Concat([]string{"add-wants", "--no-reload"}, runtime, []string{w.pick([]string{"multi-user.target", w.marker + "tgt.target"}), w.pick(names)})...)
	case 5:
		if w.rng.IntN(3) == 0 {
			w.systemctl(slices.Concat([]string{"mask", "--no-reload"}, runtime, []string{w.pick(names)})...)
		}
	}
}

// brkVerdict is what one name reads as.
type brkVerdict struct {
	name, id, load, prop, fresh string
	names                       []string
	fragment                    string
	tie                         bool
	validate                    error
}

func (v brkVerdict) String() string {
	return fmt.Sprintf("%s: Id=%s LoadState=%s UnitFileState=%s GetUnitFileState(Id)=%s Names=%v FragmentPath=%s mayTie=%v Validate(links)=%v",
		v.name, v.id, v.load, v.prop, v.fresh, v.names, v.fragment, v.tie, v.validate)
}

// brkCheck reads name every way and reports a break: systemd reports it
// enabled or linked (its UnitFileState, or GetUnitFileState of its Id)
// while mayTie rules it out, or Validate with the scan accepts it.
func brkCheck(ctx context.Context, t *testing.T, s *Systemd, links *Links, cfg Config, name string) (brkVerdict, bool) {
	t.Helper()
	v := brkVerdict{name: name}
	props, err := brkAll(ctx, s, name)
	if err != nil {
		return v, false // a name systemd cannot load at all
	}
	v.id, v.load, v.prop = str(props, "Id"), str(props, "LoadState"), str(props, "UnitFileState")
	v.fresh, _ = brkFreshState(ctx, s, v.id)
	v.names, v.fragment, err = brkHeld(ctx, s, name)
	if err != nil {
		t.Errorf("%s: the held read: %v", name, err)
		return v, false
	}
	v.tie = links.mayTie(v.names, v.fragment)
	_, v.validate = s.Validate(ctx, name, cfg, links)
	enabled := brkEnabled(v.prop) || brkEnabled(v.fresh)
	broken := enabled && !v.tie
	if brkEnabled(v.prop) && v.load == "loaded" && strings.HasSuffix(v.id, ".service") &&
		(v.validate == nil || !strings.Contains(v.validate.Error(), "UnitFileState=")) {
		broken = true
	}
	return v, broken
}

func brkCfg(marker string) Config {
	return Config{StopWait: 4 * time.Second, Guard: []string{"/run/ul-test/guard"}, DaemonUnit: marker + "daemon.service"}
}

// TestNodeBreakLinksRandomLayouts builds random layouts of unit files and
// links, by hand and with systemctl (enable, enable --runtime, link,
// add-wants, mask), in every directory of the unit path, in the
// directories within them, in the generator directories (after the
// reload, as nothing else puts links there), and outside the unit path,
// reloads, scans, and checks every name: a unit that systemd reports
// enabled, enabled-runtime, linked or linked-runtime must not be ruled
// out by mayTie, and must be refused by Validate with the scan.
func TestNodeBreakLinksRandomLayouts(t *testing.T) {
	s := dialNode(t, Options{})
	ctx := ctxFor(t, 4*time.Minute)
	path := brkUnitPath(ctx, t, s)
	var tops []string
	for _, d := range path {
		if !slices.Contains(brkGenerators, d) {
			tops = append(tops, d)
		}
	}
	rng := rand.New(rand.NewPCG(252, 2026))
	seen := map[string]int{}
	const rounds = 30 // 100 found nothing either (57 enabled, 57 enabled-runtime, 12 linked, 5 linked-runtime)
	t.Cleanup(func() { brkSweep(path, "ul-brkr") })
	for round := range rounds {
		w := newBrkWorld(t, rng, round, tops)
		w.randomUnits()
		for range 4 + rng.IntN(10) {
			if rng.IntN(3) == 0 {
				w.randomSystemctl()
			} else {
				w.randomLink(false)
			}
		}
		systemctl(t, "daemon-reload")
		for range rng.IntN(3) {
			w.randomLink(true) // after the reload: the generator directories too
		}
		links, err := s.ScanLinks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		names := slices.Concat(w.plain, w.instances, w.others)
		var broken, all []string
		for _, name := range names {
			v, bad := brkCheck(ctx, t, s, links, brkCfg(w.marker), name)
			if v.id == "" {
				continue
			}
			seen[v.prop]++
			all = append(all, v.String())
			if bad {
				broken = append(broken, v.String())
			}
		}
		if len(broken) > 0 {
			t.Errorf("round %d: systemd reports enabled or linked, the scan rules it out:\n  %s\nall names:\n  %s\nlayout:\n  %s",
				round, strings.Join(broken, "\n  "), strings.Join(all, "\n  "), strings.Join(w.log, "\n  "))
		}
		brkSweep(path, w.marker)
	}
	var states []string
	for st, n := range seen {
		states = append(states, fmt.Sprintf("%q:%d", st, n))
	}
	sort.Strings(states)
	t.Logf("UnitFileState of the names read over %d rounds: %s", rounds, strings.Join(states, " "))
	if seen["enabled"] == 0 || seen["linked"]+seen["linked-runtime"]+seen["enabled-runtime"] == 0 {
		t.Errorf("the layouts made no unit enabled, or none linked or enabled-runtime: they test too little (%v)", seen)
	}
}

// TestNodeBreakLinksCases: the ways of making a unit enabled or linked
// one at a time, each checked as TestNodeBreakLinksRandomLayouts checks
// its names; each case must make systemd report a state it refuses, or
// the case tests nothing.
func TestNodeBreakLinksCases(t *testing.T) {
	s := dialNode(t, Options{})
	ctx := ctxFor(t, 3*time.Minute)
	path := brkUnitPath(ctx, t, s)
	const m = "ul-brkc-"
	t.Cleanup(func() { brkSweep(path, m) })
	etc, run, lib := "/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system"
	install := func(lines ...string) string { return plainService + "\n[Install]\n" + strings.Join(lines, "\n") + "\n" }
	type op func(w *brkWorld)
	file := func(path, text string) op { return func(w *brkWorld) { w.write(path, text) } }
	link := func(target, path string) op { return func(w *brkWorld) { w.symlink(target, path) } }
	sc := func(args ...string) op { return func(w *brkWorld) { w.systemctl(args...) } }
	cases := []struct {
		name   string
		unit   string // the name to validate
		before []op   // before the reload
		after  []op   // after it
	}{
		{"requires", m + "req.service", []op{file(etc+"/"+m+"req.service", install("RequiredBy=multi-user.target")), sc("enable", "--no-reload", m+"req.service")}, nil},
		{"upholds", m + "uph.service", []op{file(etc+"/"+m+"uph.service", plainService), link("../"+m+"uph.service", etc+"/"+m+"tgt.target.upholds/"+m+"uph.service")}, nil},
		{"vendor unit enabled in /etc", m + "vend.service", []op{file(lib+"/"+m+"vend.service", install("WantedBy=multi-user.target")), sc("enable", "--no-reload", m+"vend.service")}, nil},
		{"vendor unit, link by /lib", m + "vlib.service", []op{file(lib+"/"+m+"vlib.service", plainService), link("/lib/systemd/system/"+m+"vlib.service", etc+"/multi-user.target.wants/"+m+"vlib.service")}, nil},
		{"wants link to /dev/null", m + "null.service", []op{file(etc+"/"+m+"null.service", plainService), link("/dev/null", etc+"/multi-user.target.wants/"+m+"null.service")}, nil},
		{"dangling wants link", m + "dang.service", []op{file(etc+"/"+m+"dang.service", plainService), link("/nowhere/"+m+"other.service", etc+"/multi-user.target.wants/"+m+"dang.service")}, nil},
		{"wants link to a file of another name", m + "oth.service", []op{file(etc+"/"+m+"oth.service", plainService), file(brkOutside+"/"+m+"else.service", plainService), link(brkOutside+"/"+m+"else.service", etc+"/multi-user.target.wants/"+m+"oth.service")}, nil},
		{"link, runtime", m + "lnkrt.service", []op{file(brkOutside+"/"+m+"lnkrt.service", plainService), sc("link", "--runtime", "--no-reload", brkOutside+"/"+m+"lnkrt.service")}, nil},
		{"link through two hops to another name", m + "hops.service", []op{file(brkOutside+"/"+m+"final.service", plainService), link(brkOutside+"/"+m+"final.service", brkOutside+"/"+m+"hop.service"), link(brkOutside+"/"+m+"hop.service", etc+"/"+m+"hops.service")}, nil},
		{"link, relative", m + "rel.service", []op{file(brkOutside+"/"+m+"rel.service", plainService), link("../../../opt/ul-brk/"+m+"rel.service", etc+"/"+m+"rel.service")}, nil},
		{"link from /run to /etc", m + "runetc.service", []op{file(etc+"/"+m+"runetc.service", plainService), link(etc+"/"+m+"runetc.service", run+"/"+m+"runetc.service")}, nil},
		{"enabled in system.control", m + "ctl.service", []op{file(lib+"/"+m+"ctl.service", plainService), link(lib+"/"+m+"ctl.service", "/etc/systemd/system.control/multi-user.target.wants/"+m+"ctl.service")}, nil},
		{"enabled in run's system.control", m + "rctl.service", []op{file(lib+"/"+m+"rctl.service", plainService), link(lib+"/"+m+"rctl.service", "/run/systemd/system.control/multi-user.target.wants/"+m+"rctl.service")}, nil},
		{"enabled in system.attached", m + "att.service", []op{file(lib+"/"+m+"att.service", plainService), link(lib+"/"+m+"att.service", "/etc/systemd/system.attached/multi-user.target.wants/"+m+"att.service")}, nil},
		{"enabled in /usr/local", m + "loc.service", []op{file("/usr/local/lib/systemd/system/"+m+"loc.service", plainService), link("../"+m+"loc.service", "/usr/local/lib/systemd/system/multi-user.target.wants/"+m+"loc.service")}, nil},
		{"enabled in the transient directory", m + "tr.service", []op{file(etc+"/"+m+"tr.service", plainService), link(etc+"/"+m+"tr.service", "/run/systemd/transient/multi-user.target.wants/"+m+"tr.service")}, nil},
		{"wants link in the generator directory", m + "gen.service", []op{file(etc+"/"+m+"gen.service", plainService)}, []op{link(etc+"/"+m+"gen.service", "/run/systemd/generator/multi-user.target.wants/"+m+"gen.service")}},
		{"wants link in generator.late", m + "genl.service", []op{file(etc+"/"+m+"genl.service", plainService)}, []op{link(etc+"/"+m+"genl.service", "/run/systemd/generator.late/multi-user.target.wants/"+m+"genl.service")}},
		{"wants link in generator.early", m + "gene.service", []op{file(etc+"/"+m+"gene.service", plainService)}, []op{link(etc+"/"+m+"gene.service", "/run/systemd/generator.early/multi-user.target.wants/"+m+"gene.service")}},
		{"wants link made without a reload", m + "norl.service", []op{file(etc+"/"+m+"norl.service", plainService)}, []op{link("../"+m+"norl.service", etc+"/multi-user.target.wants/"+m+"norl.service")}},
		{"DefaultInstance", m + "di@dflt.service", []op{file(etc+"/"+m+"di@.service", install("WantedBy=multi-user.target", "DefaultInstance=dflt")), sc("enable", "--no-reload", m+"di@.service")}, nil},
		{"instance through a template alias", m + "ta@x.service", []op{file(lib+"/"+m+"tr@.service", install("WantedBy=multi-user.target", "Alias="+m+"ta@.service")), sc("enable", "--no-reload", m+"tr@x.service")}, nil},
		{"instance of an aliased template", m + "tb@x.service", []op{file(lib+"/"+m+"tq@.service", plainService), link(lib+"/"+m+"tq@.service", etc+"/"+m+"tb@.service"), link("../"+m+"tq@.service", etc+"/multi-user.target.wants/"+m+"tq@x.service")}, nil},
		{"instance link to the template by another name", m + "ti@x.service", []op{file(lib+"/"+m+"ti@.service", plainService), file(lib+"/"+m+"tz@.service", plainService), link(lib+"/"+m+"tz@.service", etc+"/multi-user.target.wants/"+m+"ti@x.service")}, nil},
		{"instance linked at the top", m + "tt@x.service", []op{file(lib+"/"+m+"tt@.service", plainService), link(lib+"/"+m+"tt@.service", etc+"/"+m+"tt@x.service")}, nil},
		{"alias enabled", m + "alreal.service", []op{file(etc+"/"+m+"alreal.service", install("Alias="+m+"alname.service")), sc("enable", "--no-reload", m+"alreal.service")}, nil},
		{"alias name validated", m + "alname2.service", []op{file(etc+"/"+m+"alreal2.service", install("WantedBy=multi-user.target", "Alias="+m+"alname2.service")), sc("enable", "--no-reload", m+"alreal2.service")}, nil},
		{"unit dir is a link", m + "dirl.service", []op{file(brkOutside+"/d/"+m+"dirl.service", plainService), link(brkOutside+"/d", etc+"/"+m+"x.target.wants"), link(brkOutside+"/d/"+m+"dirl.service", etc+"/"+m+"dirl.service")}, nil},
	}
	w := newBrkWorld(t, rand.New(rand.NewPCG(1, 2)), 0, nil)
	w.marker = m
	for _, c := range cases {
		for _, o := range c.before {
			o(w)
		}
	}
	systemctl(t, "daemon-reload")
	for _, c := range cases {
		for _, o := range c.after {
			o(w)
		}
	}
	links, err := s.ScanLinks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		v, bad := brkCheck(ctx, t, s, links, brkCfg(m), c.unit)
		switch {
		case bad:
			t.Errorf("%s: systemd reports enabled or linked, the scan rules it out: %v", c.name, v)
		case !brkEnabled(v.prop) && !brkEnabled(v.fresh):
			t.Logf("%s: not a state validation refuses (the case tests nothing): %v", c.name, v)
		default:
			t.Logf("%s: held: %v", c.name, v)
		}
	}
	if t.Failed() {
		t.Logf("layout:\n  %s", strings.Join(w.log, "\n  "))
	}
}

// TestNodeBreakLinksUnitPathIsTheLookupPath: systemd works UnitFileState
// out with a unit path of its own (unit_file_get_state initialises the
// lookup paths anew), not the manager's UnitPath, which the scan reads.
// Every directory of the one must be in the other.
func TestNodeBreakLinksUnitPathIsTheLookupPath(t *testing.T) {
	s := dialNode(t, Options{})
	ctx := ctxFor(t, time.Minute)
	path := brkUnitPath(ctx, t, s)
	out, err := exec.Command("systemd-analyze", "unit-paths").Output()
	if err != nil {
		t.Fatalf("systemd-analyze unit-paths: %v", err)
	}
	canon := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return filepath.Clean(p)
	}
	have := map[string]bool{}
	for _, p := range path {
		have[p], have[canon(p)] = true, true
	}
	for _, p := range strings.Fields(string(out)) {
		if !have[p] && !have[canon(p)] {
			t.Errorf("systemd-analyze unit-paths lists %s, the manager's UnitPath does not: the scan would miss links there\nUnitPath: %v", p, path)
		}
	}
	t.Logf("UnitPath: %v", path)
}

// TestNodeBreakLinksAfterTheScan: a scan is a snapshot. A unit enabled
// after it (in the same batch of validations) is accepted by Validate
// with that scan, though systemd then reports it enabled; a new scan
// refuses it. The daemon scans again at the next reload, which
// systemctl enable makes.
func TestNodeBreakLinksAfterTheScan(t *testing.T) {
	s := dialNode(t, Options{})
	ctx := ctxFor(t, time.Minute)
	const unit = "ul-brka-late.service"
	// wanted by a target that is not loaded: no WantedBy= shows it
	installUnits(t, map[string]string{unit: plainService + "[Install]\nWantedBy=ul-brka-later.target\n"})
	t.Cleanup(func() { systemctlQuiet("disable", unit) })
	links, err := s.ScanLinks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	systemctl(t, "enable", unit)
	state := show(t, unit, "UnitFileState")
	_, stale := s.Validate(ctx, unit, brkCfg("ul-brka-"), links)
	fresh, err := s.ScanLinks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, now := s.Validate(ctx, unit, brkCfg("ul-brka-"), fresh)
	t.Logf("UnitFileState=%s; Validate with the scan taken before the enable: %v; with a new scan: %v", state, stale, now)
	if stale == nil && brkEnabled(state) {
		t.Logf("NOTE a scan is a snapshot: %s, UnitFileState=%s, is accepted with the scan taken before systemctl enable", unit, state)
	}
	if !errors.Is(now, ErrRefused) {
		t.Errorf("UnitFileState=%s: Validate with a scan taken after the enable = %v, want refused", state, now)
	}
}

// TestNodeBreakLinksCachedState: systemd keeps a loaded unit's
// UnitFileState once worked out, until a reload. A link made by hand
// while the unit runs (no reload) makes it start at the next boot:
// GetUnitFileState reports it enabled, the UnitFileState property may
// not. The scan must not rule it out. And a link removed by hand the same
// way leaves the property enabled while nothing ties the unit any more.
func TestNodeBreakLinksCachedState(t *testing.T) {
	s := dialNode(t, Options{})
	ctx := ctxFor(t, time.Minute)
	const added, removed = "ul-brkk-added.service", "ul-brkk-removed.service"
	install := plainService + "[Install]\nWantedBy=multi-user.target\n"
	installUnits(t, map[string]string{added: install, removed: install})
	wants := filepath.Join(unitDir, "multi-user.target.wants")
	t.Cleanup(func() {
		os.Remove(filepath.Join(wants, added))
		systemctlQuiet("disable", removed)
		systemctlQuiet("daemon-reload")
	})
	systemctl(t, "enable", removed)
	systemctl(t, "start", added, removed)
	// both loaded, their UnitFileState worked out
	t.Logf("before: %s UnitFileState=%s, %s UnitFileState=%s", added, show(t, added, "UnitFileState"), removed, show(t, removed, "UnitFileState"))
	if err := os.Symlink("../"+added, filepath.Join(wants, added)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(wants, removed)); err != nil {
		t.Fatal(err)
	}
	links, err := s.ScanLinks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := brkCfg("ul-brkk-")
	a, _ := brkCheck(ctx, t, s, links, cfg, added)
	_, aAsked := s.Validate(ctx, added, cfg, nil)
	t.Logf("link added by hand: %v; Validate without a scan: %v", a, aAsked)
	if a.fresh != "enabled" {
		t.Fatalf("%s: GetUnitFileState=%s after a link by hand, want enabled: the test sets it up wrong", added, a.fresh)
	}
	if !a.tie {
		t.Errorf("%s: GetUnitFileState=enabled, the scan rules it out: %v", added, a)
	}
	if !errors.Is(a.validate, ErrRefused) {
		// Without a scan validation reads only the UnitFileState
		// property, kept from before the link; with one, a tied unit is
		// also asked GetUnitFileState.
		t.Errorf("%s will start at the next boot (GetUnitFileState=%s), but Validate knowing the links accepts it (the UnitFileState property is %q, kept from before the link)", added, a.fresh, a.prop)
	}
	r, _ := brkCheck(ctx, t, s, links, cfg, removed)
	_, rAsked := s.Validate(ctx, removed, cfg, nil)
	t.Logf("link removed by hand: %v; Validate without a scan: %v", r, rAsked)
	if brkEnabled(r.fresh) {
		t.Errorf("%s: GetUnitFileState=%s after its link was removed", removed, r.fresh)
	}
	if brkEnabled(r.prop) && !r.tie {
		// systemd reports it enabled (kept from before), the scan rules
		// it out: it is no longer enabled on disk, so this is safe.
		t.Logf("NOTE %s: UnitFileState property %s (kept), GetUnitFileState %s, mayTie false: Validate with the scan accepts it, without one refuses it", removed, r.prop, r.fresh)
	}
}

// TestNodeBreakLinksPrivateSocket: over systemd's private socket (no bus,
// no sender name), Unit.Ref may fail; readSettingsKnowing must then read
// as readSettings does, never accept what readSettings refuses.
func TestNodeBreakLinksPrivateSocket(t *testing.T) {
	s := dialNode(t, Options{Private: true})
	ctx := ctxFor(t, time.Minute)
	const plain, enabled = "ul-brkp-plain.service", "ul-brkp-enabled.service"
	install := plainService + "[Install]\nWantedBy=multi-user.target\n"
	installUnits(t, map[string]string{plain: install, enabled: install})
	systemctl(t, "enable", enabled)
	t.Cleanup(func() { systemctlQuiet("disable", enabled) })
	links, err := s.ScanLinks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refErr := s.with(ctx, func(c *sd.Conn) error {
		bus, err := s.busOf(c)
		if err != nil {
			return err
		}
		obj := bus.Object("org.freedesktop.systemd1", dbus.ObjectPath("/org/freedesktop/systemd1/unit/"+sd.PathBusEscape(plain)))
		if err := obj.CallWithContext(ctx, "org.freedesktop.systemd1.Unit.Ref", 0).Err; err != nil {
			return err
		}
		return obj.CallWithContext(ctx, "org.freedesktop.systemd1.Unit.Unref", 0).Err
	})
	t.Logf("Unit.Ref over the private socket: %v", refErr)
	known, err := s.readSettingsKnowing(ctx, plain, links)
	if err != nil {
		t.Fatal(err)
	}
	full, err := s.readSettings(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s read knowing the links over the private socket: UnitFileState=%q (\"\": systemd was not asked)", plain, known.UnitFileState)
	if _, err := s.Validate(ctx, enabled, brkCfg("ul-brkp-"), links); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "UnitFileState=enabled") {
		t.Errorf("%s, enabled: Validate over the private socket knowing the links = %v, want refused for UnitFileState=enabled", enabled, err)
	}
	full.UnitFileState, known.UnitFileState = "", ""
	full.sortSets()
	known.sortSets()
	if fmt.Sprintf("%+v", full) != fmt.Sprintf("%+v", known) {
		t.Errorf("over the private socket, read knowing the links\n%+v\nread asking for everything\n%+v", known, full)
	}
}

// TestNodeBreakLinksSameVerdicts: for units that each break one rule
// of validation (and none tied by a link), Validate with a scan gives the
// same verdict, with the same reasons, as Validate without one: the read
// one property at a time misses nothing that a rule needs.
func TestNodeBreakLinksSameVerdicts(t *testing.T) {
	s := dialNode(t, Options{})
	ctx := ctxFor(t, time.Minute)
	const m = "ul-brkv-"
	svc := func(extra string) string { return "[Service]\nExecStart=/bin/sleep infinity\n" + extra }
	files := map[string]string{
		m + "ok.service":        svc(""),
		m + "process.service":   svc("KillMode=process\n"),
		m + "none.service":      svc("KillMode=none\n"),
		m + "nokill.service":    svc("SendSIGKILL=no\n"),
		m + "oneshot.service":   "[Service]\nType=oneshot\nExecStart=/bin/true\n",
		m + "refstart.service":  "[Unit]\nRefuseManualStart=yes\n" + svc(""),
		m + "refstop.service":   "[Unit]\nRefuseManualStop=yes\n" + svc(""),
		m + "wanted.service":    svc(""),
		m + "wanter.service":    "[Unit]\nWants=" + m + "wanted.service\nRequires=" + m + "required.service\nUpholds=" + m + "upheld.service\nBindsTo=" + m + "bound.service\nOnFailure=" + m + "onfail.service\nOnSuccess=" + m + "onsucc.service\n" + svc(""),
		m + "required.service":  svc(""),
		m + "upheld.service":    svc(""),
		m + "bound.service":     svc(""),
		m + "onfail.service":    svc(""),
		m + "onsucc.service":    svc(""),
		m + "sock.socket":       "[Socket]\nListenStream=/run/" + m + "sock\n",
		m + "sock.service":      svc(""),
		m + "timer.timer":       "[Timer]\nOnCalendar=yearly\nUnit=" + m + "timed.service\n",
		m + "timed.service":     svc(""),
		m + "busname.service":   "[Service]\nType=dbus\nBusName=org.example.UlBrk\nExecStart=/bin/sleep infinity\n",
		m + "final.service":     svc("FinalKillSignal=SIGQUIT\n"),
		m + "abort.service":     svc("TimeoutStopFailureMode=abort\n"),
		m + "stops.service":     svc("ExecStop=/bin/true\nExecStop=/bin/true\nExecStop=/bin/true\nExecStopPost=/bin/true\nExecStopPost=/bin/true\nTimeoutStopSec=1h\n"),
		m + "long.service":      svc("TimeoutStopSec=1h\n"),
		m + "pre.service":       svc("ExecStartPre=/bin/true\nExecStartPre=-/bin/false\n"),
		m + "afterbind.service": "[Unit]\nBindsTo=" + m + "ok.service\nAfter=" + m + "ok.service\n" + svc(""),
		"/usr/lib/systemd/system/" + m + "masked.service": svc(""),
		m + "static.service":                              svc(""),
		m + "dropin.service":                              svc(""),
		m + "dropin.service.d/50-x.conf":                  "[Service]\nKillMode=process\n",
		m + "tmpl@.service":                               svc("KillMode=mixed\n"),
	}
	installUnits(t, files)
	// the reverse dependencies (WantedBy=, TriggeredBy=, ...) exist only
	// while the unit that makes them is loaded
	systemctl(t, "start", m+"wanter.service", m+"sock.socket", m+"timer.timer", m+"afterbind.service")
	t.Cleanup(func() { systemctlQuiet("stop", m+"sock.socket", m+"timer.timer") })
	systemctl(t, "mask", "--runtime", m+"masked.service")
	t.Cleanup(func() { systemctlQuiet("unmask", "--runtime", m+"masked.service"); systemctlQuiet("daemon-reload") })
	links, err := s.ScanLinks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := brkCfg(m)
	var units []string
	for name := range files {
		if !strings.Contains(name, "/") && !strings.Contains(name, "@.") {
			units = append(units, name)
		}
	}
	units = append(units, m+"masked.service", m+"tmpl@one.service", m+"missing.service", m+"alias-of-nothing.service")
	sort.Strings(units)
	for _, unit := range units {
		p1, err1 := s.Validate(ctx, unit, cfg, nil)
		p2, err2 := s.Validate(ctx, unit, cfg, links)
		strip := func(err error) string {
			var re *RefusedError
			if !errors.As(err, &re) {
				return fmt.Sprint(err)
			}
			var keep []string
			for _, r := range re.Reasons {
				if !strings.HasPrefix(r, "UnitFileState=") {
					keep = append(keep, r)
				}
			}
			return strings.Join(keep, "; ")
		}
		if strip(err1) != strip(err2) {
			t.Errorf("%s: Validate without a scan: %v\nwith one: %v", unit, err1, err2)
			continue
		}
		if err1 == nil && err2 == nil && (string(p1.DropIn) != string(p2.DropIn) || fmt.Sprint(p1.Warnings) != fmt.Sprint(p2.Warnings)) {
			t.Errorf("%s: plans differ:\n%s\n%v\n---\n%s\n%v", unit, p1.DropIn, p1.Warnings, p2.DropIn, p2.Warnings)
		}
		t.Logf("%s: %v", unit, err2)
	}
}

// brkHelperEnv makes TestNodeBreakLinksInTheDaemonsSandbox, run again by
// itself inside a sandbox, print what a scan of the directories it names
// (colon-separated) finds, instead of testing.
const brkHelperEnv = "UL_BRK_SCAN_DIRS"

// TestNodeBreakLinksInTheDaemonsSandbox: the daemon scans from inside
// its unit's sandbox (packaging/unitlease.service: ProtectSystem=strict,
// ProtectHome=yes, PrivateTmp=yes, PrivateUsers=yes, no capabilities),
// where systemd, which works UnitFileState out, is not. A scan there must
// find every link name that one outside finds, or fail. Links whose
// targets the sandbox hides (a unit file linked from /root) lose only
// the file they lead to, never their names.
func TestNodeBreakLinksInTheDaemonsSandbox(t *testing.T) {
	if dirs := os.Getenv(brkHelperEnv); dirs != "" {
		links, err := scanLinks(strings.Split(dirs, ":"))
		if err != nil {
			fmt.Printf("SCAN-ERROR %v\n", err)
			return
		}
		for n := range links.names {
			fmt.Printf("NAME %s\n", n)
		}
		fmt.Printf("FILES %d\n", len(links.files))
		return
	}
	s := dialNode(t, Options{})
	ctx := ctxFor(t, time.Minute)
	const unit = "ul-brks-home.service"
	home := "/root/ul-brks/" + unit
	if err := os.MkdirAll(filepath.Dir(home), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(home, []byte(plainService+"[Install]\nWantedBy=multi-user.target\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		systemctlQuiet("disable", unit)
		os.RemoveAll(filepath.Dir(home))
		systemctlQuiet("daemon-reload")
	})
	systemctl(t, "link", home)
	systemctl(t, "enable", unit)
	path := brkUnitPath(ctx, t, s)
	outside, err := scanLinks(path)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--wait", "--pipe", "--quiet", "--collect",
		"-p", "ProtectSystem=strict", "-p", "ReadWritePaths=/run/systemd/system", "-p", "ProtectHome=yes",
		"-p", "PrivateUsers=yes", "-p", "PrivateTmp=yes", "-p", "PrivateDevices=yes", "-p", "CapabilityBoundingSet=",
		"-p", "NoNewPrivileges=yes", "-p", "ProtectKernelTunables=yes", "-p", "ProtectControlGroups=yes",
		"-E", brkHelperEnv + "=" + strings.Join(path, ":"),
		self, "-test.run", "^TestNodeBreakLinksInTheDaemonsSandbox$"}
	out, err := exec.Command("systemd-run", args...).CombinedOutput()
	if err != nil {
		t.Skipf("systemd-run with the daemon's sandbox: %v\n%s", err, out)
	}
	inside := map[string]bool{}
	var files string
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "SCAN-ERROR "):
			t.Logf("the scan fails in the sandbox (validation then asks systemd): %s", line)
			return
		case strings.HasPrefix(line, "NAME "):
			inside[strings.TrimPrefix(line, "NAME ")] = true
		case strings.HasPrefix(line, "FILES "):
			files = strings.TrimPrefix(line, "FILES ")
		}
	}
	for n := range outside.names {
		if !inside[n] {
			t.Errorf("the scan outside the sandbox finds a link named (or to) %s, the scan inside does not", n)
		}
	}
	if !inside[unit] {
		t.Errorf("inside the sandbox, no link names %s, linked from /root and enabled", unit)
	}
	t.Logf("names: %d outside, %d inside; files: %d outside, %s inside", len(outside.names), len(inside), len(outside.files), files)
	t.Logf("%s: UnitFileState=%s", unit, show(t, unit, "UnitFileState"))
}
