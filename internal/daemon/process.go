package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// RunOptions are the parts of a daemon tests and packaging may change.
type RunOptions struct {
	Socket   string         // default control.SocketPath
	StateDir string         // default StateDir
	Unitctl  unitctl.Config // Guard, DaemonUnit; StopWait comes from the config
	// TuneGC has the daemon set the collector's target (GOGC) in its
	// steady state for the number of its leases (GCPercent); false
	// leaves the target as it is (GOGC set in the environment).
	TuneGC bool
}

// Run is `unitlease run`: it manages every annotated unit until ctx ends
// (SIGTERM), then stops the units it runs, releases their leases and
// returns.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger, opts RunOptions) error {
	if opts.Socket == "" {
		opts.Socket = control.SocketPath
	}
	// Nothing of the process writes to stderr behind log's back: the log
	// package's output (net/http's, say) and go-redis's own messages go
	// through log, which never blocks (logging.Async).
	slog.SetDefault(log)
	redislease.LogTo(log)
	sd, err := unitctl.Dial(ctx, unitctl.Options{Logf: func(f string, a ...any) { log.Info(fmt.Sprintf(f, a...)) }})
	if err != nil {
		return fmt.Errorf("systemd: %w", err)
	}
	defer sd.Close()
	// The lease span covers how late this daemon may act before its
	// watchdog has it killed: known only from the unit systemd loaded.
	unit := opts.Unitctl.DaemonUnit
	if unit == "" {
		unit = "unitlease.service"
	}
	interval, allowance, err := watchdogAllowance(ctx, sd, unit)
	if err != nil {
		return fmt.Errorf("%w: not starting: %w", ErrSetup, err)
	}
	if err := cfg.SetAllowance(allowance); err != nil {
		return fmt.Errorf("%w: not starting: %s with WatchdogSec %v: %w", ErrSetup, unit, interval, err)
	}
	store, err := redislease.New(cfg.RedisConfig())
	if err != nil {
		return err
	}
	defer store.Close()
	// A Redis that answers but will not say which server it is would
	// fail every request: a setup error, not an outage to wait out.
	// Nor one whose user may not read as a standby must (an ACL without
	// a command unitlease needs).
	if err := store.Ping(ctx); errors.Is(err, redislease.ErrNoIdentity) || errors.Is(err, redislease.ErrPermission) {
		return fmt.Errorf("%w: not starting: %w", ErrSetup, err)
	}
	if err := sentinelSafe(ctx, cfg.RedisConfig(), store); err != nil {
		return fmt.Errorf("%w: not starting: %w", ErrSetup, err)
	}
	warnDurability(ctx, store, log)
	d := New(cfg, log, store, sd, opts.Unitctl, newNotifier(log).send)
	if opts.TuneGC {
		d.gcTarget = func(leases int) { debug.SetGCPercent(GCPercent(leases)) }
	}
	d.stateDir = cmp.Or(opts.StateDir, StateDir)
	d.loadDrained()
	// The endpoint outlives ctx as the watchdog does: a SIGTERM hands the
	// leases off, and a stop that fails keeps its lease held for as long
	// as systemd lets the daemon wait; a scrape must still show it.
	mctx, stopMetrics := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMetrics()
	if cfg.Metrics.Enabled {
		if err := d.serveMetrics(mctx, cfg.Metrics); err != nil {
			return fmt.Errorf("%w: not starting: %w", ErrSetup, err)
		}
	}
	serveErr := make(chan error, 1)
	go func() {
		l, err := control.Listen(opts.Socket)
		if err == nil {
			err = control.Serve(ctx, l, d)
		}
		serveErr <- err
	}()
	t := cfg.Timing
	log.Info(fmt.Sprintf("unitlease %s on node %s: lease span %v, retry %v, renew deadline %v, stop wait %v, allowance %v (watchdog %v)",
		Version, cfg.Node, t.LeaseSpan, t.Retry, t.RenewDeadline, t.StopWait, t.Allowance, interval),
		logging.Event, "daemon_start")
	// The watchdog outlives ctx: a SIGTERM hands the leases off, and a
	// daemon that hangs while its units still run must still be killed.
	// It runs from before the first discovery, which at thousands of
	// units outlasts a watchdog interval.
	wctx, stopWatchdog := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatchdog()
	go d.watchdog(wctx, interval)
	d.firstReload(ctx)
	go d.watchSuspend(ctx) // a resume wakes every lease at once
	go d.watchSleep(ctx)   // leases are handed off before the machine sleeps
	go d.steerLoop(ctx)    // failure thresholds, preferences, failback
	return d.loop(ctx, sd, serveErr)
}

// ReadyWithin bounds how long the daemon takes to report READY=1: it has
// its configuration, Redis and systemd by then, and it reports READY once
// the first discovery has started a supervisor for every annotated lease,
// or once ReadyWithin has passed, whichever comes first. Past that (at
// thousands of units: validating each, writing the drop-ins, systemd's
// reload) the discovery goes on behind a STATUS= that says so, and the
// start timeout never grows with the number of units.
const ReadyWithin = 5 * time.Second

// firstReload is the first discovery, with READY=1 sent at its end or
// after ReadyWithin.
func (d *Daemon) firstReload(ctx context.Context) {
	d.starting.Store(true)
	defer d.starting.Store(false)
	ready := sync.OnceFunc(func() { d.notify("READY=1") })
	early := time.AfterFunc(ReadyWithin, func() {
		d.notify("STATUS=starting: " + d.startProgress())
		ready()
	})
	begun := time.Now()
	d.Reload(ctx)
	// Neither the early READY's STATUS= nor the watchdog's may come
	// after the summary Reload just sent.
	early.Stop()
	d.starting.Store(false)
	ready()
	d.notify("STATUS=" + d.summary())
	var took []string
	for i, p := range d.phases {
		end := time.Now()
		if i+1 < len(d.phases) {
			end = d.phases[i+1].at
		}
		took = append(took, fmt.Sprintf("%s %v", p.what, end.Sub(p.at).Round(time.Millisecond)))
	}
	d.log.Info(fmt.Sprintf("first discovery done in %v: %s", time.Since(begun).Round(time.Millisecond), strings.Join(took, "; ")))
}

// exitFor hands every lease off and returns the error Run exits with
// when the watchdog's settings no longer bound a hung daemon as the
// lease span in force needs.
func (d *Daemon) exitFor(ctx context.Context, err error) error {
	d.log.Error(err.Error(), logging.Event, "config_error")
	d.Shutdown(context.WithoutCancel(ctx))
	return fmt.Errorf("%w: exiting: %w", ErrSetup, err)
}

// WatchdogRecheck is how often the daemon reads its watchdog's settings
// again between systemd's reloads.
const WatchdogRecheck = 30 * time.Second

// ErrSetup is wrapped by the errors of Run that a setting causes (the
// daemon's unit, or the configuration against it), not a failure.
var ErrSetup = errors.New("setup")

// Version is set at build time.
var Version = "dev"

func (d *Daemon) loop(ctx context.Context, sd *unitctl.Systemd, serveErr <-chan error) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reloads := sd.Reloads(ctx)
	// `systemctl service-watchdogs no` is no reload: look every so often.
	recheck := time.NewTicker(WatchdogRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			d.log.Info("stopping: handing off every lease this node holds", logging.Event, "daemon_stop")
			// No limit of its own: a stop that failed keeps the lease
			// held until it succeeds, and systemd's TimeoutStopSec=
			// bounds the wait; every other lease is released within a
			// stop and a release.
			d.Shutdown(context.WithoutCancel(ctx))
			return nil
		case err := <-serveErr:
			if err != nil {
				return fmt.Errorf("control socket: %w", err)
			}
		case <-hup:
			d.log.Info("SIGHUP: reloading annotations", logging.Event, "reload")
			d.Reload(ctx)
		case <-recheck.C:
			if err := d.allowanceGrew(ctx); err != nil {
				return d.exitFor(ctx, err)
			}
		case <-reloads:
			if err := d.allowanceGrew(ctx); err != nil {
				return d.exitFor(ctx, err)
			}
			d.log.Info("systemd reloaded: reloading annotations", logging.Event, "reload")
			d.Reload(ctx)
		case <-d.again:
			d.Reload(ctx) // a removal that waited on a failed stop ended
		}
	}
}

// sentinelSafe refuses a Sentinel setup whose master, cut off from the
// sentinels, could take a leader's renewal after a standby acquired on
// the promoted replica, or whose settings it cannot read: systemd starts
// the daemon again (Restart=on-failure), so a Redis that was down comes
// back in reach.
func sentinelSafe(ctx context.Context, rc redislease.Config, store *redislease.Store) error {
	if !rc.Sentinel() {
		return nil
	}
	f, err := store.Failover(ctx)
	if err != nil {
		return fmt.Errorf("redis sentinel: %w", err)
	}
	if p := f.Problems(); len(p) > 0 {
		return fmt.Errorf("redis sentinel setup allows two holders of a lease (%s): %s", f.Inequality(), strings.Join(p, "; "))
	}
	return nil
}

func warnDurability(ctx context.Context, store *redislease.Store, log *slog.Logger) {
	dur := store.Durability(ctx)
	if !dur.CanLoseAcked {
		return
	}
	for _, f := range dur.Findings {
		log.Warn("Redis can lose an acknowledged write: "+f, logging.Event, "durability")
	}
}
