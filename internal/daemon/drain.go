package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/redislease"
)

// StateDir is where the daemon keeps what must outlive it: the drain
// (StateDirectory= of its unit, root's only).
const StateDir = "/var/lib/unitlease"

// drainedFile is the drain's mark: present while the node is drained.
func (d *Daemon) drainedFile() string { return filepath.Join(d.stateDir, "drained") }

// loadDrained reads the drain's mark at startup. A mark that cannot be
// read is taken as drained: an operator who drained the node meant it
// to take nothing, and a node wrongly drained only waits for undrain.
func (d *Daemon) loadDrained() {
	if d.stateDir == "" {
		return
	}
	_, err := os.Stat(d.drainedFile())
	switch {
	case err == nil:
		d.drained.Store(true)
		d.log.Warn("this node is drained: it takes no lease until `unitlease undrain`", logging.Event, "drained")
	case !errors.Is(err, fs.ErrNotExist):
		d.drained.Store(true)
		d.log.Error(fmt.Sprintf("cannot read the drain's mark %s (%v): taking the node as drained until `unitlease undrain`", d.drainedFile(), err),
			logging.Event, "drained")
	}
}

// saveDrained writes or removes the mark, durably, before the drain or
// undrain takes effect.
func (d *Daemon) saveDrained(drained bool) error {
	if d.stateDir == "" {
		return errors.New("the daemon has no state directory to keep the drain in")
	}
	path := d.drainedFile()
	if !drained {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("undrain: %w", err)
		}
		return syncDir(d.stateDir)
	}
	if err := os.MkdirAll(d.stateDir, 0o700); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	_, err = fmt.Fprintf(f, "drained at %s\n", time.Now().UTC().Format(time.RFC3339))
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return syncDir(d.stateDir)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Drained reports whether the node is drained.
func (d *Daemon) Drained() bool { return d.drained.Load() }

// Drain keeps the node from taking any lease from now on (across
// restarts and reboots), then hands each lease it holds to a peer that
// announces itself ready for it, all at once. A lease no peer is ready
// for keeps running here, unless stop: then it is stopped and released
// all the same, and rests released until a node takes it.
func (d *Daemon) Drain(ctx context.Context, stop bool) (control.DrainResult, error) {
	if err := d.saveDrained(true); err != nil {
		return control.DrainResult{}, err
	}
	d.wmu.Lock()
	if !d.drained.Swap(true) {
		d.log.Info("drained: taking no lease, and handing off the ones held here", logging.Event, "drained")
	}
	d.withdrawAll(ctx)
	d.wmu.Unlock()
	d.announce(ctx)
	res := control.DrainResult{Node: d.cfg.Node, Drained: true}
	var mu sync.Mutex
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for _, s := range d.supervisors() {
		if !s.Holding() {
			continue
		}
		seen[s.Lease] = true
		wg.Go(func() {
			o := control.DrainOutcome{Lease: s.Lease}
			peers, err := d.readyPeers(ctx, s.Lease)
			switch {
			case err != nil:
				o.Outcome, o.Msg = control.DrainFailed, err.Error()
			case len(peers) == 0 && !stop:
				o.Outcome, o.Msg = control.DrainLeftRunning, "no other node announces itself ready to take it; `unitlease drain --stop` stops it anyway"
			case len(peers) == 0:
				d.intend(s.Lease, "drain")
				d.relinquish(ctx, s, false)
				o.Outcome, o.Msg = control.DrainStopped, "no other node is ready: stopped and released"
				if s.Holding() {
					o.Outcome, o.Msg = control.DrainFailed, "the stop failed: the lease stays held here"
				}
			default:
				d.intend(s.Lease, "drain")
				r, err := d.handOver(ctx, s, "")
				if err != nil {
					o.Outcome, o.Msg = control.DrainFailed, err.Error()
				} else {
					o.Outcome, o.Holder = control.DrainHandedOff, r.Holder
				}
			}
			mu.Lock()
			res.Leases = append(res.Leases, o)
			mu.Unlock()
		})
	}
	wg.Wait()
	// A standby whose acquisition was answered as the drain began may
	// have started its units before it took the Withdraw: it holds a
	// lease the loop above did not see. Say so rather than report the
	// node empty.
	for _, s := range d.supervisors() {
		if s.Holding() && !seen[s.Lease] {
			res.Leases = append(res.Leases, control.DrainOutcome{Lease: s.Lease, Outcome: control.DrainLeftRunning,
				Msg: "acquired as the drain began; run `unitlease drain` again to hand it off"})
		}
	}
	slices.SortFunc(res.Leases, func(a, b control.DrainOutcome) int { return strings.Compare(a.Lease, b.Lease) })
	return res, nil
}

// Undrain lets the node take leases again.
func (d *Daemon) Undrain(ctx context.Context) (control.DrainResult, error) {
	if err := d.saveDrained(false); err != nil {
		return control.DrainResult{}, err
	}
	d.wmu.Lock()
	if d.drained.Swap(false) {
		d.log.Info("undrained: taking leases again", logging.Event, "undrained")
	}
	d.withdrawAll(ctx)
	d.wmu.Unlock()
	d.announce(ctx)
	return control.DrainResult{Node: d.cfg.Node}, nil
}

// withdrawAll brings every supervisor's withdrawal in line with the
// node's state; d.wmu is held.
func (d *Daemon) withdrawAll(ctx context.Context) {
	for _, s := range d.supervisors() {
		s.SetWithdrawn(ctx, d.withdrawn(s.Lease))
	}
}

// withdrawn: the node stays out of lease's competition (drained,
// excluded by the lease's failures here, the lease disabled, or the
// machine about to sleep).
func (d *Daemon) withdrawn(lease string) bool {
	return d.drained.Load() || d.asleep.Load() || d.excluded(lease) || d.isDisabled(lease)
}

// announce tells the peers what this node is ready for: each lease it
// manages (ready, drained, excluded or ineligible), and whether it is
// drained. A failure is logged; the next change announces again, and
// go-redis subscribes again after a reconnect.
func (d *Daemon) announce(ctx context.Context) {
	var as []redislease.Announcement
	drained := d.drained.Load() || d.asleep.Load() // asleep: takes no lease until the resume
	if drained {
		as = append(as, redislease.Announcement{Node: d.cfg.Node, State: redislease.AnnounceDrained})
	}
	for _, r := range d.running() {
		if r.removing {
			continue
		}
		st := redislease.AnnounceReady
		switch {
		case drained:
			st = redislease.AnnounceDrained
		case d.isDisabled(r.sup.Lease):
			st = redislease.AnnounceDisabled
		case r.sup.Ineligible():
			st = redislease.AnnounceIneligible
		case d.withdrawn(r.sup.Lease):
			st = redislease.AnnounceExcluded
		}
		as = append(as, redislease.Announcement{Node: d.cfg.Node, State: st, Lease: r.sup.Lease})
	}
	if err := d.store.SetAnnouncements(context.WithoutCancel(ctx), as); err != nil {
		d.log.Warn("telling peers what this node is ready for: "+err.Error(), logging.Event, "redis_error")
	}
}
