package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/daemon"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// cmdCheck validates what `run` would refuse and warns about the rest.
func cmdCheck(args []string, stdout, stderr io.Writer) int {
	var path string
	fs, ok := flags("check", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&path, "config", config.DefaultPath, "configuration file")
	})
	if !ok || fs.NArg() > 0 {
		return 2
	}
	c := checker{out: stdout}
	cfg, err := config.Load(path)
	if err != nil {
		c.fail("configuration: %v", err)
		return c.code()
	}
	t := cfg.Timing
	c.ok("configuration %s: node %s", orDefaults(cfg.Path), cfg.Node)
	c.ok("lease span %v (safe minimum %v = retry %v + renew_deadline %v + stop_wait %v + margin %v)",
		t.LeaseSpan, t.SafeMinimum(), t.Retry, t.RenewDeadline, t.StopWait, t.Margin())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.redis(ctx, cfg)
	c.units(ctx, cfg)
	return c.code()
}

func orDefaults(p string) string {
	if p == "" || p == "(defaults)" {
		return "(none: built-in defaults)"
	}
	return p
}

type checker struct {
	out    io.Writer
	failed bool
}

func (c *checker) ok(format string, args ...any) {
	fmt.Fprintf(c.out, "ok       "+format+"\n", args...)
}
func (c *checker) warn(format string, args ...any) {
	fmt.Fprintf(c.out, "warning  "+format+"\n", args...)
}
func (c *checker) fail(format string, args ...any) {
	c.failed = true
	fmt.Fprintf(c.out, "error    "+format+"\n", args...)
}

func (c *checker) code() int {
	if c.failed {
		return 1
	}
	return 0
}

func (c *checker) redis(ctx context.Context, cfg *config.Config) {
	store, err := redislease.New(cfg.RedisConfig())
	if err != nil {
		c.fail("redis: %v", err)
		return
	}
	defer store.Close()
	if err := store.Ping(ctx); err != nil {
		c.fail("redis %s: %v", cfg.Redis.URL, err)
		return
	}
	c.ok("redis %s answers", cfg.Redis.URL)
	d := store.Durability(ctx)
	for _, f := range d.Findings {
		if d.CanLoseAcked {
			c.warn("redis durability: %s", f)
		} else {
			c.ok("redis durability: %s", f)
		}
	}
}

func (c *checker) units(ctx context.Context, cfg *config.Config) {
	sd, err := unitctl.Dial(ctx, unitctl.Options{})
	if err != nil {
		c.fail("systemd: %v", err)
		return
	}
	defer sd.Close()
	c.watchdog(ctx, sd, cfg.Timing)
	anns, errs := sd.Discover(ctx)
	for _, err := range errs {
		c.fail("%v", err)
	}
	if len(anns) == 0 && len(errs) == 0 {
		c.warn("no unit has an [X-UnitLease] section")
	}
	ucfg := unitctl.Config{StopWait: cfg.Timing.StopWait}
	for _, a := range anns {
		plan, err := sd.Validate(ctx, a.Unit, ucfg)
		var refused *unitctl.RefusedError
		switch {
		case errors.As(err, &refused):
			c.fail("%v", err)
		case err != nil:
			c.fail("%s: %v", a.Unit, err)
		default:
			c.ok("%s: lease %s (%s:%d)", a.Unit, a.Lease, a.File, a.Line)
			for _, w := range plan.Warnings {
				c.warn("%s: %s", a.Unit, w)
			}
		}
	}
}

// watchdog checks that a hung daemon is killed, and its units stopped
// through BindsTo=, within its deadline: what `run` lowers the watchdog
// to, and what it cannot fix.
func (c *checker) watchdog(ctx context.Context, sd *unitctl.Systemd, t policy.Timing) {
	const unit = "unitlease.service"
	wd, err := sd.Watchdog(ctx, unit)
	if err != nil {
		c.warn("%s: %v", unit, err)
		return
	}
	if wd == 0 {
		c.warn("%s has no WatchdogSec= (or is not installed): a daemon that hangs keeps its units running past its deadline (the packaged unit sets WatchdogSec=10s)", unit)
		return
	}
	abort, err := sd.TimeoutAbort(ctx, unit)
	if err != nil {
		c.warn("%s: %v", unit, err)
		return
	}
	f := daemon.FitWatchdog(t, abort)
	switch {
	case f.Short():
		c.warn("%s", f.ShortWarning(unit, t, abort))
	case wd > f.Max:
		c.ok("%s: run lowers WatchdogSec %v to %v, so that with TimeoutAbortSec %v a hung daemon is killed within retry %v + renew_deadline %v",
			unit, wd, f.Max, abort, t.Retry, t.RenewDeadline)
	default:
		c.ok("%s: WatchdogSec %v + TimeoutAbortSec %v: a hung daemon is killed within retry %v + renew_deadline %v",
			unit, wd, abort, t.Retry, t.RenewDeadline)
	}
}

// resetGarbage replaces a lease key that holds garbage with a released
// record, printing what it replaced.
func resetGarbage(cfg *config.Config, lease string, out io.Writer) error {
	store, err := redislease.New(cfg.RedisConfig())
	if err != nil {
		return err
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen, err := store.Observe(ctx, lease)
	if !errors.Is(err, redislease.ErrGarbage) {
		if err != nil {
			return err
		}
		if !seen.Present {
			return fmt.Errorf("lease %s: the key %s does not exist", lease, store.Key(lease))
		}
		return fmt.Errorf("lease %s %w", lease, errNotGarbage)
	}
	fmt.Fprintf(out, "replacing %v\n", err)
	rec, err := store.Overwrite(ctx, lease, seen)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "lease %s: now released at version %d; a standby may acquire it at once\n", lease, rec.Version)
	return nil
}
