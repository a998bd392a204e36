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
)

// Validate reads unit's effective settings and applies the management
// rules (see the package documentation). It returns the Plan with the
// unit's drop-in, or a *RefusedError (wrapping ErrRefused) listing every
// rule the unit breaks.
//
// A unit may still carry the drop-in of an earlier run (it lives in /run
// until reboot); Validate then sees the settings that drop-in pinned,
// which were validated when it was written, and leaves the guard out of
// the unit's own ExecStartPre= commands.
//
// links, if not nil, is a scan of the unit directories (ScanLinks) taken
// before: systemd is not asked for the UnitFileState of a unit that no
// link found can tie (see Links), which at thousands of units is most of
// what reading them costs systemd.
func (s *Systemd) Validate(ctx context.Context, unit string, cfg Config, links *Links) (*Plan, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	st, err := s.readSettingsKnowing(ctx, unit, links)
	if err != nil {
		return nil, err
	}
	guard := (&Plan{Unit: st.ID, cfg: cfg}).guardCommand()
	st.ExecStartPre = slices.DeleteFunc(st.ExecStartPre, func(c execCommand) bool { return sameExec(c, guard) })
	return newPlan(st, cfg)
}

// Install writes the drop-in of every plan, removes a drop-in an earlier
// version left under an old name, has systemd reload once for the whole
// batch, and checks that each drop-in is in effect as written. A drop-in
// already on disk byte for byte is not rewritten, and if nothing changed
// there is no reload unless the check finds one needed (a daemon
// restarting, or a unit moving to another lease, changes nothing; each
// reload makes systemd re-read every unit, and every watcher of reloads
// look again). It returns the units whose check failed (their drop-in
// stays in place: the guard keeps a non-holder from starting them;
// Uninstall removes it) and an error if the batch failed as a whole.
func (s *Systemd) Install(ctx context.Context, plans []*Plan) (map[string]error, error) {
	return s.install(ctx, plans, true)
}

// Recheck is Install for units already managed, after a systemd reload:
// it writes a drop-in that is gone or differs (systemctl revert removes
// it) and reloads only then, and checks that each drop-in is in effect.
// Unlike Install it never reloads for a failed check alone: a drop-in on
// disk but not in effect after a reload is defeated (a later drop-in, say),
// and another reload would only start another round of rechecks.
func (s *Systemd) Recheck(ctx context.Context, plans []*Plan) (map[string]error, error) {
	return s.install(ctx, plans, false)
}

func (s *Systemd) install(ctx context.Context, plans []*Plan, reloadToCheck bool) (map[string]error, error) {
	changed := false
	for _, p := range plans {
		path := p.cfg.DropInPath(p.Unit)
		if cur, err := os.ReadFile(path); err != nil || !bytes.Equal(cur, p.DropIn) {
			if err := writeAtomic(path, p.DropIn); err != nil {
				return nil, fmt.Errorf("unitctl: install drop-in: %w", err)
			}
			changed = true
		}
		// After the new file is written, so that systemd, reloading
		// between the two, still sees the guard.
		for _, old := range p.cfg.oldDropInPaths(p.Unit) {
			err := os.Remove(old)
			if err == nil {
				changed = true
			} else if !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("unitctl: remove the drop-in of an earlier version: %w", err)
			}
		}
	}
	if changed {
		if err := s.reload(ctx); err != nil {
			return nil, err
		}
	}
	called := make([]bool, len(plans)) // each InEffect once, over both checks
	failed := s.verify(ctx, plans, called)
	if len(failed) > 0 && !changed && reloadToCheck {
		// On disk but not in effect: systemd has not read it yet.
		if err := s.reload(ctx); err != nil {
			return nil, err
		}
		failed = s.verify(ctx, plans, called)
	}
	return failed, nil
}

// Verify checks, without writing or reloading anything, that p's drop-in
// is in effect as written on the unit as systemd has it loaded now: it
// returns nil, a *DropInError (wrapping ErrDropIn) listing every
// protection that is defeated and the file and line that defeat it, or
// the error of reading the unit's settings. p is what Validate returned
// for the unit; with the drop-in in effect, Validate sees the settings it
// pins.
func (s *Systemd) Verify(ctx context.Context, p *Plan) error {
	return s.verify(ctx, []*Plan{p}, nil)[p.Unit]
}

// verify checks each plan's drop-in against what systemd applies, and
// calls the InEffect of each that is in effect and whose called is false
// yet (nil: none was). The reads (readInEffect) go out ReadsInFlight at
// a time.
func (s *Systemd) verify(ctx context.Context, plans []*Plan, called []bool) map[string]error {
	errs := make([]error, len(plans))
	if called == nil {
		called = make([]bool, len(plans))
	}
	Each(len(plans), ReadsInFlight, func(i int) {
		st, err := s.readInEffect(ctx, plans[i].Unit)
		if err == nil {
			err = plans[i].verify(st)
		}
		errs[i] = err
		if err == nil && plans[i].InEffect != nil && !called[i] {
			called[i] = true
			plans[i].InEffect()
		}
	})
	failed := map[string]error{}
	for i, err := range errs {
		if err != nil {
			failed[plans[i].Unit] = err
		}
	}
	return failed
}

// ReadsInFlight is how many reads of units' settings go to systemd at
// once when many units are validated or verified: enough to keep systemd
// busy while each answer is decoded, few enough that other calls (a stop,
// a start) wait behind a handful, not thousands.
const ReadsInFlight = 8

// Each calls f(0) to f(n-1), at most limit at a time, and returns when
// all have returned.
func Each(n, limit int, f func(i int)) {
	sem := make(chan struct{}, max(1, limit))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// Uninstall removes the drop-ins of units (written with cfg), under the
// current name and the names of earlier versions, and has systemd reload
// once. A unit without a drop-in is no error.
func (s *Systemd) Uninstall(ctx context.Context, cfg Config, units []string) error {
	cfg = cfg.withDefaults()
	var errs []error
	for _, u := range units {
		path := cfg.DropInPath(u)
		for _, p := range append([]string{path}, cfg.oldDropInPaths(u)...) {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		_ = os.Remove(filepath.Dir(path)) // only if empty
		if err := os.Remove(cfg.EnvFile(u)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, s.reload(ctx))...)
}

// WriteEnv is the package's WriteEnv.
func (s *Systemd) WriteEnv(cfg Config, unit string, env [][2]string) error {
	return WriteEnv(cfg, unit, env)
}

// WriteEnv writes unit's environment file (Config.EnvFile), which its
// drop-in names in EnvironmentFile=: one NAME='VALUE' line per pair,
// through a rename, so a start never reads half of it. systemd reads a
// single-quoted value as it is, backslashes included (a lease name may
// hold systemd's \x2d escapes); a value with a single quote or a line
// break, which no lease, node or token has, is refused.
func WriteEnv(cfg Config, unit string, env [][2]string) error {
	var b strings.Builder
	for _, kv := range env {
		if strings.ContainsAny(kv[1], "'\n\r") {
			return fmt.Errorf("unitctl: environment of %s: %s=%q cannot be quoted", unit, kv[0], kv[1])
		}
		fmt.Fprintf(&b, "%s='%s'\n", kv[0], kv[1])
	}
	if err := writeAtomic(cfg.EnvFile(unit), []byte(b.String())); err != nil {
		return fmt.Errorf("unitctl: environment of %s: %w", unit, err)
	}
	return nil
}

// reload is systemctl daemon-reload. A reload interrupted by a re-exec is
// repeated; a repeated reload is harmless.
func (s *Systemd) reload(ctx context.Context) error {
	err := s.with(ctx, func(c *sd.Conn) error { return c.ReloadContext(ctx) })
	if err != nil {
		return fmt.Errorf("unitctl: daemon-reload: %w", err)
	}
	return nil
}

// writeAtomic writes data to path through a temporary file and a rename,
// so systemd never reads half a drop-in.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
