package unitctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// discoveryWorkers bounds the D-Bus calls in flight during Discover.
const discoveryWorkers = 8

// Discover finds every service with an [X-UnitLease] section, reading the
// files systemd itself applies to each unit (FragmentPath, then
// DropInPaths in order); unitlease does not resolve units of its own.
//
// Which units to ask systemd about is decided cheaply: the files in the
// directories of systemd's UnitPath that contain "[X-UnitLease]" name
// them (a fragment by its file name, a drop-in by its NAME.service.d
// directory; a drop-in for all services or a name prefix makes every
// service a candidate), and loaded services (ListUnits) and the names in
// extra are always asked. A template's instances are found when loaded;
// name others in extra.
//
// It returns the annotations sorted by unit, and the errors: an
// *AnnotationError for a malformed section (that unit is left out, the
// others are not) and errors of single units systemd could not describe.
// A failure to list units at all is the only error with no annotations.
func (s *Systemd) Discover(ctx context.Context, extra ...string) ([]Annotation, []error) {
	d := discovery{s: s, files: fileCache{m: map[string][]byte{}}, seen: map[string]bool{}}
	names, err := d.candidates(ctx, extra)
	if err != nil {
		return nil, []error{err}
	}
	d.run(ctx, names)
	slices.SortFunc(d.found, func(a, b Annotation) int { return strings.Compare(a.Unit, b.Unit) })
	return d.found, d.errs
}

// candidates lists the services to ask systemd about, without templates.
func (d *discovery) candidates(ctx context.Context, extra []string) ([]string, error) {
	var loaded []sd.UnitStatus
	var unitPath string
	err := d.s.with(ctx, func(c *sd.Conn) (err error) {
		if loaded, err = c.ListUnitsContext(ctx); err == nil {
			unitPath, err = aside(ctx, func() (string, error) { return c.GetManagerProperty("UnitPath") })
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("unitctl: list units: %w", err)
	}
	dirs, err := dbus.ParseVariant(unitPath, dbus.ParseSignatureMust("as"))
	if err != nil {
		return nil, fmt.Errorf("unitctl: UnitPath %s: %w", unitPath, err)
	}
	m := marks{units: map[string]bool{}}
	for _, dir := range dirs.Value().([]string) {
		d.scan(&m, dir)
	}
	names := slices.Clone(extra)
	for _, u := range loaded {
		names = append(names, u.Name)
	}
	for u := range m.units {
		names = append(names, u)
	}
	if m.all {
		names = append(names, m.every...)
	}
	names = slices.DeleteFunc(names, func(n string) bool {
		return !strings.HasSuffix(n, ".service") || strings.HasSuffix(n, "@.service")
	})
	slices.Sort(names)
	return slices.Compact(names), nil
}

// marks is what a scan of the unit directories found.
type marks struct {
	units map[string]bool // services a file with the section is named for
	all   bool            // a drop-in with the section applies to many services
	every []string        // every service file seen, for all
}

// scan looks at the files of one unit directory and its drop-in
// directories. An unreadable directory is skipped: the units systemd
// loaded from it are asked about anyway.
func (d *discovery) scan(m *marks, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		switch {
		case strings.HasSuffix(name, ".service"):
			m.every = append(m.every, name)
			if d.files.marked(path) {
				m.units[name] = true
			}
		case strings.HasSuffix(name, ".d") && e.IsDir():
			if d.dropInDirMarked(path) {
				m.markDropIn(strings.TrimSuffix(name, ".d"))
			}
		}
	}
}

func (d *discovery) dropInDirMarked(dir string) bool {
	confs, _ := filepath.Glob(filepath.Join(dir, "*.conf"))
	return slices.ContainsFunc(confs, d.files.marked)
}

// markDropIn records a drop-in directory NAME.d with the section: for one
// service, for a template (its instances are asked anyway), or for many
// services (service.d, or a prefix such as foo-.service.d).
func (m *marks) markDropIn(name string) {
	switch {
	case name == "service" || strings.HasSuffix(name, "-.service"):
		m.all = true
	case strings.HasSuffix(name, ".service"):
		m.units[name] = true
	}
}

// discovery is one Discover in progress.
type discovery struct {
	s     *Systemd
	files fileCache

	mu    sync.Mutex
	seen  map[string]bool // unit IDs done, so an alias is not counted twice
	found []Annotation
	errs  []error
}

func (d *discovery) run(ctx context.Context, names []string) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range discoveryWorkers {
		wg.Go(func() {
			for name := range work {
				d.unit(ctx, name)
			}
		})
	}
	for _, n := range names {
		select {
		case work <- n:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if ctx.Err() != nil {
		d.errs = append(d.errs, fmt.Errorf("unitctl: discovery cut short: %w", ctx.Err()))
	}
}

// unit reads one candidate's files and parses its annotation.
func (d *discovery) unit(ctx context.Context, name string) {
	id, paths, err := d.paths(ctx, name)
	if err != nil {
		d.fail(fmt.Errorf("unitctl: %s: %w", name, err))
		return
	}
	contents := make([][]byte, len(paths))
	marked := false
	for i, p := range paths {
		contents[i], err = d.files.read(p)
		if err != nil {
			d.fail(fmt.Errorf("unitctl: %s: %w", name, err))
			return
		}
		marked = marked || bytes.Contains(contents[i], sectionHeader)
	}
	if marked {
		d.marked(id, paths, contents)
	}
}

// discoveryProps are what discovery reads of a candidate: its own name
// (name may be an alias) and which files make it up.
var discoveryProps = []string{"Id", "FragmentPath", "DropInPaths"}

// paths asks systemd for the unit's own name and the files that make up
// the unit, in the order it applies them: in one round, the unit held
// loaded (unitPropsHeld), or, if it cannot be held, one call each.
func (d *discovery) paths(ctx context.Context, name string) (string, []string, error) {
	var props map[string]any
	err := d.s.with(ctx, func(c *sd.Conn) (err error) {
		props, _, err = d.s.unitPropsHeld(ctx, c, name, discoveryProps, false)
		return err
	})
	if err != nil && ctx.Err() == nil {
		props = map[string]any{}
		for _, p := range discoveryProps {
			v, err := d.s.unitProperty(ctx, name, p)
			if err != nil {
				return "", nil, err
			}
			props[p] = v.Value()
		}
	} else if err != nil {
		return "", nil, err
	}
	return str(props, "Id"), unitFiles(str(props, "FragmentPath"), strs(props, "DropInPaths")), nil
}

// marked parses the annotation of a unit whose files carry the section,
// under the unit's own name (its Id).
func (d *discovery) marked(unit string, paths []string, contents [][]byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen[unit] {
		return
	}
	d.seen[unit] = true
	a, err := parseAnnotation(unit, paths, contents)
	switch {
	case err != nil:
		d.errs = append(d.errs, err)
	case a != nil:
		d.found = append(d.found, *a)
	}
}

func (d *discovery) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, err)
}

// fileCache reads each file once.
type fileCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

// marked reports whether the file at path contains the section header.
func (c *fileCache) marked(path string) bool {
	b, err := c.read(path)
	return err == nil && bytes.Contains(b, sectionHeader)
}

func (c *fileCache) read(path string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.m[path]; ok {
		return b, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b, err = nil, nil // removed since systemd loaded it: it no longer applies after a reload
	}
	if err != nil {
		return nil, err
	}
	c.m[path] = b
	return b, nil
}
