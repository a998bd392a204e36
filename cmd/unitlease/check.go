package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/daemon"
	"github.com/unitlease/unitlease/internal/inert"
	"github.com/unitlease/unitlease/internal/metrics"
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
	c.ok("configuration %s: node %s", orDefaults(cfg.Path), cfg.Node)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !c.watchdog(ctx, cfg) {
		return c.code()
	}
	t := cfg.Timing
	c.ok("lease span %v (safe minimum %v = retry %v + renew_deadline %v + stop_wait %v + margin %v: allowance %v and clock drift)",
		t.LeaseSpan, t.SafeMinimum(), t.Retry, t.RenewDeadline, t.StopWait, t.Margin(), t.Allowance)
	c.timeline(cfg)
	c.sandbox(cfg)
	c.metrics(cfg.Metrics)
	c.redis(ctx, cfg)
	c.units(ctx, cfg)
	return c.code()
}

// metrics says where the endpoint serves, and warns when it is reachable
// from beyond this machine: it speaks plain HTTP without credentials.
func (c *checker) metrics(m config.Metrics) {
	if !m.Enabled {
		c.ok("metrics: off ([metrics] enabled = true serves them at http://%s%s)", m.Listen, metrics.Path)
		return
	}
	host, _, _ := net.SplitHostPort(m.Listen)
	if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
		c.ok("metrics: http://%s%s, on loopback", m.Listen, metrics.Path)
		return
	}
	c.warn("metrics: http://%s%s is reachable from beyond this machine, in plain HTTP without credentials: only on a network you trust, or keep loopback behind a TLS proxy", m.Listen, metrics.Path)
}

// hidden are the paths unitlease.service's sandbox hides from the daemon,
// and the setting that hides them: check, run by hand, can read what the
// daemon cannot.
var hidden = []struct{ prefix, why string }{
	{"/home/", "ProtectHome=yes hides /home"},
	{"/root/", "ProtectHome=yes hides /root"},
	{"/run/user/", "ProtectHome=yes hides /run/user"},
	{"/tmp/", "PrivateTmp=yes gives the daemon its own /tmp"},
	{"/var/tmp/", "PrivateTmp=yes gives the daemon its own /var/tmp"},
	{"/dev/", "PrivateDevices=yes hides most of /dev"},
}

// sandbox reports each file the configuration names that the daemon's
// sandbox would hide from it.
func (c *checker) sandbox(cfg *config.Config) {
	r := cfg.Redis
	for _, f := range []struct{ key, path string }{
		{"redis.password_file", r.PasswordFile}, {"redis.sentinel_password_file", r.SentinelPasswordFile},
		{"redis.ca_file", r.CAFile}, {"redis.cert_file", r.CertFile}, {"redis.key_file", r.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		abs, err := filepath.Abs(f.path)
		if err != nil {
			continue
		}
		for _, h := range hidden {
			if strings.HasPrefix(abs+"/", h.prefix) {
				c.fail("%s %s: the daemon cannot read it (%s in unitlease.service); put it under /etc/unitlease", f.key, f.path, h.why)
			}
		}
	}
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
	fmt.Fprintln(c.out, "ok       "+inert.Text(fmt.Sprintf(format, args...)))
}
func (c *checker) warn(format string, args ...any) {
	fmt.Fprintln(c.out, "warning  "+inert.Text(fmt.Sprintf(format, args...)))
}
func (c *checker) fail(format string, args ...any) {
	c.failed = true
	fmt.Fprintln(c.out, "error    "+inert.Text(fmt.Sprintf(format, args...)))
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
	rc := cfg.RedisConfig()
	where := rc.Where()
	if err := store.Ping(ctx); err != nil {
		c.fail("redis %s: %v", where, err)
		return
	}
	c.ok("redis %s answers", where)
	if hosts := rc.Plaintext(); len(hosts) > 0 {
		c.warn("redis %s: plain TCP to %s, not this machine: the password and every record cross the network in clear; use rediss:// (or tls = true with sentinels) and ca_file", where, strings.Join(hosts, ", "))
	}
	if rc.Sentinel() {
		c.sentinel(ctx, store)
	}
	d := store.Durability(ctx)
	for _, f := range d.Findings {
		if d.CanLoseAcked {
			c.warn("redis durability: %s", f)
		} else {
			c.ok("redis durability: %s", f)
		}
	}
}

// sentinel reports the settings that bound a split brain and the
// inequality they must meet, with the numbers.
func (c *checker) sentinel(ctx context.Context, store *redislease.Store) {
	f, err := store.Failover(ctx)
	if err != nil {
		c.fail("redis sentinel: %v", err)
		return
	}
	c.ok("redis sentinel: %d of %d sentinels answer (quorum %d), %d replicas, down-after-milliseconds %v, failover-timeout %v; the weakest of %d servers: min-replicas-to-write %d, min-replicas-max-lag %v",
		f.Sentinels, f.Known, f.Quorum, f.Replicas, f.DownAfter, f.FailoverTimeout, len(f.Servers), f.MinReplicas, f.MaxLag)
	for _, u := range f.Unchecked {
		c.warn("redis sentinel: replica %s is down: its min-replicas settings were not read (it is not promoted while down; run check again once it is back)", u)
	}
	p := f.Problems()
	if len(p) == 0 {
		c.ok("redis sentinel: a master cut off from the sentinels stops taking writes before a replica can be promoted (%s)", f.Inequality())
		return
	}
	for _, msg := range p {
		c.fail("redis sentinel: %s; run refuses this setup", msg)
	}
}

func (c *checker) units(ctx context.Context, cfg *config.Config) {
	sd, err := unitctl.Dial(ctx, unitctl.Options{})
	if err != nil {
		c.fail("systemd: %v", err)
		return
	}
	defer sd.Close()
	anns, errs := sd.Discover(ctx)
	for _, err := range errs {
		c.fail("%v", err)
	}
	if len(anns) == 0 && len(errs) == 0 {
		c.warn("no unit has an [X-UnitLease] section")
	}
	ucfg := unitctl.Config{StopWait: cfg.Timing.StopWait}
	daemonState := map[string]string{} // the daemon unit's ActiveState, read once
	links, err := sd.ScanLinks(ctx)
	if err != nil {
		links = nil // each unit's UnitFileState from systemd
	}
	for _, a := range anns {
		plan, err := sd.Validate(ctx, a.Unit, ucfg, links)
		var refused *unitctl.RefusedError
		switch {
		case errors.As(err, &refused):
			c.fail("%v", err)
			_, statErr := os.Stat(ucfg.DropInPath(a.Unit))
			c.refusedDropIn(a.Unit, ucfg.DropInPath(a.Unit), statErr == nil)
		case err != nil:
			c.fail("%s: %v", a.Unit, err)
		default:
			c.ok("%s: lease %s (%s:%d)", a.Unit, a.Lease, a.File, a.Line)
			for _, w := range plan.Warnings {
				c.warn("%s: %s", a.Unit, w)
			}
			d := dropInState{unit: a.Unit, path: plan.DropInPath(), daemon: plan.DaemonUnit(),
				verified: sd.Verify(ctx, plan), want: plan.DropIn, protections: plan.Protections()}
			if _, ok := daemonState[d.daemon]; !ok {
				daemonState[d.daemon], _ = sd.ActiveState(ctx, d.daemon)
			}
			d.daemonState = daemonState[d.daemon]
			d.onDisk, err = os.ReadFile(d.path)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				c.fail("%s: read its drop-in: %v", a.Unit, err)
				continue
			}
			c.dropIn(d)
		}
	}
}

// dropInState is what check found of the drop-in of a unit that passed
// validation.
type dropInState struct {
	unit, path  string
	daemon      string // the unit the drop-in binds it to
	daemonState string // its ActiveState; "" if it could not be read
	verified    error  // what Verify said of the drop-in on the unit as systemd has it loaded
	onDisk      []byte // the file's contents; nil if it is missing
	want        []byte // what this configuration writes
	protections string // what the drop-in enforces
}

// dropIn reports whether the unit's drop-in is installed and its
// protections are in effect: an error for each protection that is
// defeated, naming the file and line that defeat it. A unit with no
// drop-in yet while no daemon runs is a warning: the daemon writes it
// when it starts.
func (c *checker) dropIn(d dropInState) {
	var de *unitctl.DropInError
	switch {
	case errors.As(d.verified, &de) && !de.Applied && !de.OnDisk && !activeStates[d.daemonState]:
		c.warn("%s: no drop-in yet (%s): %s is %s, and writes it when it starts; until then a start of %s does not go through the guard",
			d.unit, d.path, d.daemon, orUnknown(d.daemonState), d.unit)
	case de != nil:
		for _, p := range de.Problems {
			c.fail("%s: drop-in %s not in effect: %s", d.unit, d.path, p)
		}
		if !de.Applied && !de.OnDisk {
			c.fail("%s: %s is %s but has not written %s: it does at the next systemctl daemon-reload, unless it refused the unit (journalctl -u %s)",
				d.unit, d.daemon, orUnknown(d.daemonState), d.path, d.daemon)
		}
	case d.verified != nil:
		c.fail("%s: verify its drop-in %s: %v", d.unit, d.path, d.verified)
	default:
		c.ok("%s: drop-in %s in effect: %s", d.unit, d.path, d.protections)
		switch {
		case d.onDisk == nil:
			c.warn("%s: systemd applies %s, but it is gone from disk: the next daemon-reload drops it, and only a running %s writes it again",
				d.unit, d.path, d.daemon)
		case !bytes.Equal(d.onDisk, d.want):
			c.warn("%s: %s differs from what this configuration writes: the daemon that wrote it runs with another configuration or version; restart %s to apply this one",
				d.unit, d.path, d.daemon)
		}
	}
}

// refusedDropIn says whether a refused unit still has a drop-in: the
// daemon writes none for a unit refused when it starts managing the lease,
// and leaves one in place when a later reload finds the unit refused.
func (c *checker) refusedDropIn(unit, path string, onDisk bool) {
	if onDisk {
		c.warn("%s: its drop-in %s is still on disk (the guard in it runs where systemd applies it), but the unit is refused: the daemon does not run it on this node", unit, path)
		return
	}
	c.warn("%s: no drop-in (%s): the daemon does not manage a refused unit, and a start of it does not go through the guard", unit, path)
}

// activeStates are the ActiveState values of a daemon that runs.
var activeStates = map[string]bool{"active": true, "reloading": true, "activating": true}

func orUnknown(state string) string {
	if state == "" {
		return "in an unknown state"
	}
	return state
}

// watchdog reads unitlease.service's watchdog as systemd loaded it and
// sets the allowance it gives, as `run` does: the lease span covers it.
// It reports false when `run` would refuse to start.
func (c *checker) watchdog(ctx context.Context, cfg *config.Config) bool {
	const unit = "unitlease.service"
	sd, err := unitctl.Dial(ctx, unitctl.Options{})
	if err != nil {
		c.warn("systemd: %v: the lease span below assumes the packaged %s (allowance %v)", err, unit, cfg.Timing.Allowance)
		return true
	}
	defer sd.Close()
	// systemd reports the watchdog of a service that runs: a stopped
	// unitlease.service has WatchdogUSec=infinity whatever its file says.
	// Everything else run checks is read as it is (service watchdogs
	// enforced, TimeoutAbortSec=), with the packaged WatchdogSec=.
	var reader daemon.WatchdogReader = sd
	stopped := ""
	if loaded, err := sd.Watchdog(ctx, unit); err == nil && loaded == math.MaxInt64 {
		if st, err := sd.ActiveState(ctx, unit); err == nil && !activeStates[st] {
			reader, stopped = packagedWatchdog{sd}, st
		}
	}
	w, err := daemon.UnitWatchdog(ctx, reader, unit, 0)
	if err == nil {
		err = cfg.SetAllowance(w.Allowance)
	}
	if err != nil {
		c.fail("%v (run refuses to start)", err)
		return false
	}
	if stopped != "" {
		c.warn("%s is %s, and systemd reports a watchdog only while it runs: the lease span below assumes the packaged WatchdogSec=%v (allowance %v); run checks the real one when it starts (it refuses none, or infinity), and check does once it runs",
			unit, stopped, w.Interval, cfg.Timing.Allowance)
		return true
	}
	c.ok("%s: WatchdogSec %v + a third of it + TimeoutAbortSec %v + systemd's timer slack: a daemon that stops acting is killed, and its units stopped through BindsTo=, within the allowance %v after a deadline",
		unit, w.Interval, w.Abort, cfg.Timing.Allowance)
	return true
}

// packagedWatchdogInterval is the packaged unitlease.service's WatchdogSec=.
const packagedWatchdogInterval = 2 * time.Second

// packagedWatchdog reads systemd as it is but for WatchdogSec=, which it
// takes to be the packaged one: systemd reports none for a stopped
// service.
type packagedWatchdog struct{ daemon.WatchdogReader }

func (packagedWatchdog) Watchdog(context.Context, string) (time.Duration, error) {
	return packagedWatchdogInterval, nil
}

// clearStopFailed releases a lease whose record is stop_failed (its
// holder could not stop the units), with the unit keys that mirror it,
// printing what it replaced. The operator vouches that no process of the
// lease's units is left on the node the record names.
// clearLease tells every daemon that watches lease to forget its
// failures; with stopFailed it also releases a stop_failed record. A
// stop_failed record without it is left blocked, and said so: forgetting
// failures must not vouch that a holder's units are gone (rule 10).
func clearLease(cfg *config.Config, lease string, stopFailed bool, out io.Writer) error {
	return withStore(cfg, 30*time.Second, func(ctx context.Context, store *redislease.Store) error {
		heard, err := store.ClearFailures(ctx, lease)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "lease %s: failures forgotten by the %d daemons watching it; a node they excluded competes again\n", lease, heard)
		if !stopFailed {
			rec, err := store.Observe(ctx, lease)
			if err == nil && rec.StopFailed {
				return fmt.Errorf("lease %s is %s: its holder could not stop its units, and no node takes the lease until they stop; once no process of them is left on %s, `unitlease clear --stop-failed %s` releases it",
					lease, rec, rec.Holder, lease)
			}
			return nil
		}
		was, now, units, err := store.Clear(ctx, lease)
		if errors.Is(err, redislease.ErrNotStopFailed) {
			return fmt.Errorf("%w: --stop-failed releases only a lease whose holder could not stop its units (use `unitlease handoff` to move a lease)", err)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "lease %s: was stop_failed on %s at version %d\n", lease, was.Holder, was.Version)
		if len(units) > 0 {
			fmt.Fprintf(out, "unit keys released with it: %s\n", strings.Join(units, ", "))
		}
		fmt.Fprintf(out, "lease %s: now released at version %d; a standby may acquire it at once\n", lease, now.Version)
		return nil
	})
}

// disableLease marks the lease disabled, then waits until its holder,
// if any, has stopped its units and released it, and says how it ended.
func disableLease(cfg *config.Config, lease string, out io.Writer) error {
	return withStore(cfg, 30*time.Second, func(ctx context.Context, store *redislease.Store) error {
		already, err := store.Disable(ctx, lease)
		if err != nil {
			return err
		}
		if already {
			fmt.Fprintf(out, "lease %s was disabled already\n", lease)
		} else {
			fmt.Fprintf(out, "lease %s is disabled: no node takes it until `unitlease enable %s`\n", lease, lease)
		}
		// The holder's daemon reads it within poll_max (at once, if it heard
		// the message), then stops its units within stop_wait and releases.
		t := cfg.Timing
		limit := time.Now().Add(t.PollMax + t.Retry + t.StopWait + 4*t.ReplyMax + time.Second)
		for {
			rec, err := store.Observe(ctx, lease)
			switch {
			case err != nil:
				return err
			case !rec.Present:
				fmt.Fprintf(out, "lease %s: no record (no node holds it)\n", lease)
				return nil
			case rec.Released:
				fmt.Fprintf(out, "lease %s: %s; its units are stopped\n", lease, rec)
				return nil
			case rec.StopFailed:
				return fmt.Errorf("lease %s: %s: its holder could not stop the units, and keeps the lease held until they stop (see unitlease clear)", lease, rec)
			case time.Now().After(limit):
				return fmt.Errorf("lease %s: still %s: its holder's daemon has not stopped the units yet (it stops them once it reads the lease disabled; a holder cut off from Redis stops at its renew deadline)", lease, rec)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// enableLease lets the nodes take the lease again.
func enableLease(cfg *config.Config, lease string, out io.Writer) error {
	return withStore(cfg, 10*time.Second, func(ctx context.Context, store *redislease.Store) error {
		was, err := store.Enable(ctx, lease)
		if err != nil {
			return err
		}
		if !was {
			fmt.Fprintf(out, "lease %s was not disabled\n", lease)
			return nil
		}
		fmt.Fprintf(out, "lease %s is enabled: the nodes that watch it compete for it again\n", lease)
		return nil
	})
}

// resetGarbage replaces a lease key that holds garbage with a released
// record, printing what it replaced.
func resetGarbage(cfg *config.Config, lease string, out io.Writer) error {
	return withStore(cfg, 10*time.Second, func(ctx context.Context, store *redislease.Store) error {
		after := fmt.Sprintf("standbys take it once they have seen it unchanged for a lease span (%v)", cfg.Timing.LeaseSpan)
		odd, err := store.OddValue(ctx, lease)
		if err != nil {
			return err
		}
		if odd != nil {
			what := odd.String()
			if odd.Type == "string" {
				what += fmt.Sprintf(", beginning %q", odd.Head)
			}
			fmt.Fprintf(out, "replacing the value of %s: %s\n", store.Key(lease), inert.Text(what))
			rec, err := store.OverwriteOdd(ctx, lease, odd)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "lease %s: now released at version %d; %s\n", lease, rec.Version, after)
			return nil
		}
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
		fmt.Fprintf(out, "lease %s: now released at version %d; %s\n", lease, rec.Version, after)
		return nil
	})
}

// timeline prints how long each move of a lease takes with this timing.
func (c *checker) timeline(cfg *config.Config) {
	t := cfg.Timing
	c.ok("failover after a crash, a power cut or a node cut off from Redis: within lease span %v + 2 x poll_max %v + 4 x reply_max %v = %v after the holder's last renewal, then the unit's start; typically about lease span + poll_max (a standby takes the lease once it has seen the holder's last record unchanged for a lease span: it sees that record, and then the span's end, each up to a poll and a reply late, and acquires in one more reply; a holder whose record carries a longer lease span is waited out that long)",
		t.LeaseSpan, t.PollMax, t.ReplyMax, CrashBound(t))
	c.ok("failover after a release (unitlease handoff, systemctl stop unitlease): at once, then the unit's start, when a peer watches and is not backing off; within poll_max %v if its wake-up is lost",
		t.PollMax)
	c.ok("confirm wait %v: a node that acquires a lease whose key was missing (a cold start, a Redis that lost its data) holds it that long before it starts the unit",
		t.ConfirmWait())
	c.ok("backoff %v (lease span + poll_max): a node that gave a lease up (a handoff, a failed unit, a missed renewal) leaves it to its peers that long",
		t.Backoff())
}

// CrashBound is t.CrashBound.
func CrashBound(t policy.Timing) time.Duration { return t.CrashBound() }

// withStore runs f with a store of cfg's Redis and a context that ends
// after limit, and closes the store.
func withStore(cfg *config.Config, limit time.Duration, f func(context.Context, *redislease.Store) error) error {
	store, err := redislease.New(cfg.RedisConfig())
	if err != nil {
		return err
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return f(ctx, store)
}
