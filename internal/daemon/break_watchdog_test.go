package daemon

// Adversarial review of the kill allowance (commit 60adadc): the lease
// span covers WatchdogSec + a third of it + TimeoutAbortSec for a daemon
// that acts late. Each test tries to keep a leader's unit running past
// its deadline + allowance + stop_wait while the daemon keeps pinging,
// or to make the allowance in force smaller than the kill it stands for.
// A test that fails shows a way through; one that passes documents a
// step of the argument that held.

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// hangLog is a slog handler that blocks the goroutine logging a record
// whose message contains match, until release is closed: a step that
// hangs under the supervisor's lock (its journal entry is written there).
type hangLog struct {
	slog.Handler
	st *hangState
}

type hangState struct {
	match   string
	armed   atomic.Bool
	release chan struct{}
	mu      sync.Mutex
	at      time.Time // when the hang began
}

func (h hangLog) Handle(ctx context.Context, r slog.Record) error {
	if h.st.armed.Load() && strings.Contains(r.Message, h.st.match) && h.st.armed.CompareAndSwap(true, false) {
		h.st.mu.Lock()
		h.st.at = time.Now()
		h.st.mu.Unlock()
		<-h.st.release
	}
	return h.Handler.Handle(ctx, r)
}

func (h hangLog) WithAttrs(a []slog.Attr) slog.Handler {
	return hangLog{Handler: h.Handler.WithAttrs(a), st: h.st}
}

func (h hangLog) WithGroup(n string) slog.Handler {
	return hangLog{Handler: h.Handler.WithGroup(n), st: h.st}
}

// pings records when each WATCHDOG=1 reached systemd.
type pings struct {
	mu sync.Mutex
	at []time.Time
}

func (p *pings) add(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at = append(p.at, t)
}

func (p *pings) all() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.at...)
}

// watched is a daemon that leads db.service with the real watchdog
// goroutine, its pings recorded.
type watched struct {
	d    *Daemon
	tm   policy.Timing // resolved, with the watchdog's allowance
	logs *syncBuffer
	p    *pings
	ctx  context.Context
}

// leadWatched starts a daemon over store and sd with timing given
// KillAllowance(interval, abort), and its watchdog of interval; it waits
// lead (fake time; 0: twenty lease spans) and fails unless db.service is
// active then. Cancel ends it.
func leadWatched(t *testing.T, store LeaseStore, sd interface {
	Manager
	isActive(string) bool
}, timing policy.Timing, interval, abort, lead time.Duration) (*watched, context.CancelFunc) {
	t.Helper()
	timing.Allowance = KillAllowance(interval, abort)
	tm, err := timing.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	w := &watched{tm: tm, logs: &syncBuffer{}, p: &pings{}}
	w.d = New(&config.Config{Node: "node-a", Timing: tm}, logging.Text(w.logs, slog.LevelInfo), store, sd, unitctl.Config{}, func(s string) {
		if s == "WATCHDOG=1" {
			w.p.add(time.Now())
		}
	})
	w.d.clock = stillClock()
	ctx, cancel := context.WithCancel(t.Context())
	w.ctx = ctx
	w.d.Reload(ctx)
	go w.d.watchdog(ctx, interval)
	if lead == 0 {
		lead = 20 * tm.LeaseSpan
	}
	time.Sleep(lead)
	synctest.Wait()
	if !sd.isActive("db.service") {
		cancel()
		t.Fatalf("not leading after %v:\n%s", lead, w.logs)
	}
	return w, cancel
}

func stillClock() supervisor.Clock {
	return supervisor.SuspendClock(func() (supervisor.Offset, error) { return supervisor.Offset{}, nil })
}

// renewClock is memStore that notes when the last renewal succeeded.
type renewClock struct {
	*memStore
	mu   sync.Mutex
	last time.Time
}

func (r *renewClock) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	rec, err := r.memStore.Renew(ctx, name, held)
	if err == nil {
		r.mu.Lock()
		r.last = time.Now()
		r.mu.Unlock()
	}
	return rec, err
}

func (r *renewClock) lastRenewal() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// slowRenewTiming renews once a minute, so that no timer of the lease
// fires for tens of seconds after a renewal: a step hung under the
// supervisor's lock then has no goroutine waiting on that lock, which
// testing/synctest could not tell from a deadlock.
var slowRenewTiming = policy.Timing{Retry: time.Minute, RenewDeadline: 20 * time.Second, StopWait: 10 * time.Second,
	ReplyMax: 2 * time.Second, PollMin: 5 * time.Second, PollMax: 11 * time.Second, Allowance: policy.DefaultAllowance}

// hangAfterRenewal runs a daemon leading db with the real watchdog
// goroutine at interval, waits for a renewal, then, on the next ping,
// hangs a step of db's supervisor right after the tick's check, and
// delivers that ping delay later. It returns when the loop got stuck and
// when each ping reached systemd.
func hangAfterRenewal(t *testing.T, interval, delay time.Duration) (stuck time.Time, ps []time.Time) {
	sd := newFakeSystemd(map[string]string{"db.service": "db"})
	store := &renewClock{memStore: newMemStore()}
	tm, err := slowRenewTiming.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	st := &hangState{match: "failed while this node held lease", release: make(chan struct{})}
	log := slog.New(hangLog{Handler: logging.Text(logs, slog.LevelInfo).Handler(), st: st})
	var (
		p     pings
		armed atomic.Bool
		d     *Daemon
		ctx   context.Context
	)
	notify := func(s string) {
		if s != "WATCHDOG=1" {
			return
		}
		if armed.CompareAndSwap(true, false) {
			// This tick's check found every loop fine. Right after it,
			// a loop's step hangs; the ping reaches systemd delay later.
			st.armed.Store(true)
			go d.find("db").UnitFailed(ctx)
			synctest.Wait() // the step runs, and hangs
			time.Sleep(delay)
		}
		p.add(time.Now())
	}
	d = New(&config.Config{Node: "node-a", Timing: tm}, log, store, sd, unitctl.Config{}, notify)
	d.clock = stillClock()
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	d.Reload(ctx)
	go d.watchdog(ctx, interval)
	time.Sleep(3 * time.Minute)
	synctest.Wait()
	if !sd.isActive("db.service") {
		t.Fatalf("not leading after 3m:\n%s", logs)
	}
	// Just after a renewal: no timer of db's fires for tens of seconds.
	since := time.Now()
	for !store.lastRenewal().After(since) {
		time.Sleep(10 * time.Millisecond)
	}
	armed.Store(true)
	time.Sleep(5 * interval)
	synctest.Wait()
	st.mu.Lock()
	stuck = st.at
	st.mu.Unlock()
	ps = p.all()
	close(st.release) // let the bubble end
	cancel()
	if stuck.IsZero() {
		t.Fatalf("the step never hung:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "busy with one event") {
		t.Fatalf("the watchdog never saw the loop busy:\n%s", logs)
	}
	return stuck, ps
}

// Control for the test above: with the ping delivered at its check, the
// same hang has its last ping within a third of the interval, as the
// argument says.
func TestBreakWatchdogPingDeliveredAtItsCheck(t *testing.T) {
	const interval = 3 * time.Second
	synctest.Test(t, func(t *testing.T) {
		stuck, ps := hangAfterRenewal(t, interval, 0)
		if last := ps[len(ps)-1]; last.Sub(stuck) > watchdogCheck(interval) {
			t.Fatalf("last ping %v after the loop got stuck, over the check %v", last.Sub(stuck), watchdogCheck(interval))
		}
	})
}

// abortSystemd is fakeSystemd whose unitlease.service TimeoutAbortSec=
// can change, as a drop-in and a daemon-reload change it.
type abortSystemd struct {
	*fakeSystemd
	mu    sync.Mutex
	abort time.Duration
}

func (a *abortSystemd) TimeoutAbort(context.Context, string) (time.Duration, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.abort, nil
}

func (a *abortSystemd) setAbort(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.abort = d
}

// Attack: the allowance is read once, when `run` starts. TimeoutAbortSec=
// is unit configuration that a daemon-reload applies to the running
// daemon (systemd serializes WatchdogSec's original value across a reload,
// not the abort timeout): an administrator who raises it so that the
// SIGABRT's goroutine dump or core dump has time to be written (what the
// setting is documented for), then runs daemon-reload, has the running
// daemon killed that much later than the lease span allows, until it is
// restarted. The daemon reloads its annotations on systemd's Reloaded
// signal, but never reads its own unit again.
func TestBreakAbortTimeoutRaisedUnderARunningDaemon(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	synctest.Test(t, func(t *testing.T) {
		sd := &abortSystemd{fakeSystemd: newFakeSystemd(map[string]string{"db.service": "db"}), abort: time.Second}
		cfg, err := config.Parse("unitlease.toml", []byte("node = \"node-a\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// What Run does before it starts the daemon.
		interval, allowance, err := watchdogAllowance(ctx, sd, "unitlease.service")
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.SetAllowance(allowance); err != nil {
			t.Fatal(err)
		}
		logs := &syncBuffer{}
		d := New(cfg, logging.Text(logs, slog.LevelInfo), newMemStore(), sd, unitctl.Config{}, func(string) {})
		d.Reload(ctx)
		time.Sleep(time.Minute)
		synctest.Wait()
		if err := d.allowanceGrew(ctx); err != nil {
			t.Fatalf("nothing changed, yet: %v", err)
		}
		// A drop-in sets TimeoutAbortSec=30s; systemctl daemon-reload. The
		// loop asks allowanceGrew on systemd's Reloaded signal, and hands
		// every lease off and exits when it says so.
		sd.setAbort(30 * time.Second)
		abort, _ := sd.TimeoutAbort(ctx, "unitlease.service")
		if need := KillAllowance(interval, abort); d.cfg.Timing.Allowance < need && d.allowanceGrew(ctx) == nil {
			t.Fatalf("TimeoutAbortSec raised to %v under the running daemon: systemd now kills it up to %v after it stops acting, "+
				"but the allowance in force (and the lease span %v it derived) still counts %v: a leader frozen at its deadline runs its unit up to %v longer than the span allows for",
				abort, need, d.cfg.Timing.LeaseSpan, d.cfg.Timing.Allowance, need-d.cfg.Timing.Allowance)
		}
	})
}

// hangStop is fakeSystemd whose Stop of the unit does not return, whatever
// its ctx says, until released: go-systemd's startJob holds the
// connection's jobListener mutex for the whole StopUnit/StartUnit D-Bus
// call, so a StopUnitContext waits on that mutex, deaf to its ctx, while
// another lease's StartUnitContext (which unitctl runs on a ctx with no
// deadline) waits for PID 1's reply.
type hangStop struct {
	*fakeSystemd
	hang    atomic.Bool
	release chan struct{}
}

func (h *hangStop) Stop(ctx context.Context, unit string, stopWait time.Duration) error {
	if h.hang.Load() {
		<-h.release
	}
	return h.fakeSystemd.Stop(ctx, unit, stopWait)
}

// hangRenew is memStore whose renewals, once hung, never return (deaf to
// their ctx), like a request stuck in a client that does not honour it.
type hangRenew struct {
	*memStore
	hang    atomic.Bool
	release chan struct{}
}

func (h *hangRenew) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	if h.hang.Load() {
		<-h.release
		return policy.Record{}, redislease.ErrUnknown
	}
	return h.memStore.Renew(ctx, name, held)
}

// Probe (holds): a renewal carried out synchronously in carry, on the
// timer's goroutine, that never returns does not keep the deadline step
// from being taken: the step that sent it armed the timer for the
// deadline, and the timer steps on a goroutine of its own. The unit is
// stopped at the deadline, and no watchdog verdict is needed.
func TestBreakHungRenewalStillStopsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		store := &hangRenew{memStore: newMemStore(), release: make(chan struct{})}
		tm, _ := testTiming.Resolved()
		logs := &syncBuffer{}
		d := New(&config.Config{Node: "node-a", Timing: tm}, logging.Text(logs, slog.LevelInfo), store, sd, unitctl.Config{}, func(string) {})
		d.clock = stillClock()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if !sd.isActive("db.service") {
			t.Fatalf("not leading after 30s:\n%s", logs)
		}
		hungAt := time.Now()
		store.hang.Store(true)
		time.Sleep(tm.Retry + tm.RenewDeadline + 10*time.Millisecond)
		synctest.Wait()
		active := sd.isActive("db.service")
		close(store.release)
		cancel()
		if active {
			t.Fatalf("renewals hung since %v: the unit still runs past retry + renew_deadline:\n%s", hungAt, logs)
		}
	})
}

// Probe (holds): KillAllowance covers the watchdog interval, the check
// (watchdogCheck, a third, rounded down) and the abort timeout, in whole
// milliseconds rounded up, for every interval and abort timeout `run`
// accepts (up to policy.MaxDuration, no overflow); and the default is
// the packaged unit's.
func TestBreakKillAllowanceRounding(t *testing.T) {
	for _, wd := range []time.Duration{1, 2, 3, time.Microsecond, time.Millisecond + 1, 2*time.Millisecond - 1,
		450 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 2*time.Second + 1, 10 * time.Second, policy.MaxDuration} {
		for _, ab := range []time.Duration{0, 1, 100 * time.Millisecond, time.Second, policy.MaxDuration} {
			a := KillAllowance(wd, ab)
			base := wd + watchdogCheck(wd) + ab + 2*SystemdTimerSlack
			if a < base || a > base+time.Millisecond+1 || a <= 0 {
				t.Errorf("KillAllowance(%v, %v) = %v; watchdog + check + abort + systemd's slack = %v", wd, ab, a, base)
			}
		}
	}
	if err := CheckAllowance(policy.MaxDuration+1, 0); err == nil {
		t.Error("a watchdog above MaxDuration accepted")
	}
	if err := CheckAllowance(time.Second, time.Duration(math.MaxInt64)); err == nil {
		t.Error("TimeoutAbortSec=infinity accepted")
	}
}

// Probe (holds): a lease_span written in the file must cover the
// allowance `run` reads from the unit: SetAllowance refuses a span that
// was valid with the packaged allowance but is not with a longer one.
func TestBreakExplicitLeaseSpanMustCoverTheAllowance(t *testing.T) {
	def := policy.DefaultTiming()
	span := def.SafeMinimum()
	cfg, err := config.Parse("unitlease.toml", []byte("node = \"node-a\"\n[timing]\nlease_span = \""+span.String()+"\"\n"))
	if err != nil {
		t.Fatalf("the safe minimum with the packaged allowance (%v): %v", span, err)
	}
	if err := cfg.SetAllowance(KillAllowance(10*time.Second, 2*time.Second)); err == nil {
		t.Fatalf("lease_span %v accepted with an allowance of %v (safe minimum %v)", span,
			KillAllowance(10*time.Second, 2*time.Second), cfg.Timing.SafeMinimum())
	}
}

// unitWatchdogSystemd is fakeSystemd that knows unitlease.service's
// WatchdogSec= as systemd loaded it (the property `check` reads).
type unitWatchdogSystemd struct {
	*fakeSystemd
	watchdog time.Duration
}

func (u unitWatchdogSystemd) Watchdog(context.Context, string) (time.Duration, error) {
	return u.watchdog, nil
}

// Attack: `run` takes the interval from WATCHDOG_USEC, `check` from the
// unit's WatchdogUSec property. systemd enforces the property; the
// variable is only what the process was told, and the unit's own
// Environment= is merged after systemd's variables, so
// Environment=WATCHDOG_USEC=100000 (someone "lowering the daemon's
// watchdog") overrides it: the daemon then derives its allowance from
// 100ms while systemd kills it only 30s after its last ping. `check`
// (property) and `run` (variable) disagree and nothing compares them.
func TestBreakWatchdogUsecFromTheEnvironmentNotTheUnit(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	sd := unitWatchdogSystemd{fakeSystemd: newFakeSystemd(nil), watchdog: 30 * time.Second}
	interval, allowance, err := watchdogAllowance(context.Background(), sd, "unitlease.service")
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	abort, _ := sd.TimeoutAbort(context.Background(), "unitlease.service")
	enforced, _ := sd.Watchdog(context.Background(), "unitlease.service")
	if need := KillAllowance(enforced, abort); allowance < need {
		t.Fatalf("systemd enforces WatchdogSec %v on the unit, the environment says %v: run starts with the allowance %v, "+
			"but a daemon that stops acting is killed up to %v later (%v short); check, reading the property, would report %v",
			enforced, interval, allowance, need, need-allowance, need)
	}
}

// notes records sd_notify messages with when they were sent.
type notes struct {
	mu sync.Mutex
	at []time.Time
	m  []string
}

func (n *notes) add(s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.at, n.m = append(n.at, time.Now()), append(n.m, s)
}

// first is when msg was first sent (zero: never), last when it was last.
func (n *notes) when(msg string) (first, last time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, m := range n.m {
		if m == msg {
			if first.IsZero() {
				first = n.at[i]
			}
			last = n.at[i]
		}
	}
	return first, last
}

// Attack: the watchdog ends with the daemon's ctx (SIGTERM), and Shutdown
// begins with STOPPING=1, on which systemd leaves the running state and
// disarms the watchdog (it is armed only in start-post, running and
// reload), while the daemon still leads and its units still run until the
// handoff's stop completes. From then on a daemon that freezes, or a loop
// that hangs, is bounded by TimeoutStopSec= (90 s in the packaged unit),
// not by the allowance (3.667 s) the lease span covers: a standby takes
// over after the span (38.745 s) while the frozen leader's unit runs on.
// `systemctl stop unitlease` is not affected (the units' BindsTo= and
// After= stop them first, in the same transaction); a SIGTERM that comes
// from anything else (kill, systemctl kill, a process supervisor) is.
//
// The test keeps the handoff's stop from completing (the stop call hangs)
// to hold the window open, and checks what systemd would see: STOPPING=1
// while the unit runs, and no ping after the SIGTERM.
func TestBreakShutdownDisarmsTheWatchdogWhileTheUnitRuns(t *testing.T) {
	const interval = 2 * time.Second
	synctest.Test(t, func(t *testing.T) {
		sd := &hangStop{fakeSystemd: newFakeSystemd(map[string]string{"db.service": "db"}), release: make(chan struct{})}
		store := newMemStore()
		tm, _ := testTiming.Resolved()
		logs := &syncBuffer{}
		var n notes
		d := New(&config.Config{Node: "node-a", Timing: tm}, logging.Text(logs, slog.LevelInfo), store, sd, unitctl.Config{}, n.add)
		d.clock = stillClock()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		go d.watchdog(ctx, interval)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if !sd.isActive("db.service") {
			t.Fatalf("not leading after 30s:\n%s", logs)
		}
		sd.hang.Store(true)
		// SIGTERM: what loop does on ctx's end.
		term := time.Now()
		cancel()
		done := make(chan struct{})
		go func() {
			d.Shutdown(context.WithoutCancel(ctx))
			close(done)
		}()
		time.Sleep(3 * interval)
		synctest.Wait()
		active := sd.isActive("db.service")
		stopping, _ := n.when("STOPPING=1")
		_, lastPing := n.when("WATCHDOG=1")
		close(sd.release)
		<-done
		if active && !stopping.IsZero() && !stopping.After(time.Now()) && lastPing.Before(term.Add(interval)) {
			t.Fatalf("SIGTERM at %v: STOPPING=1 sent %v after it while db.service still runs (lease held, handoff under way); "+
				"last ping %v before the SIGTERM, none since (the watchdog goroutine ended with ctx): systemd no longer watches the daemon, "+
				"and a daemon that freezes now is killed only after TimeoutStopSec=, not within the allowance %v",
				term.Format("15:04:05"), stopping.Sub(term), term.Sub(lastPing), tm.Allowance)
		}
	})
}

// sdEventAccuracy is sd-event's DEFAULT_ACCURACY_USEC: a timer added with
// accuracy 0, as service_start_watchdog adds the service watchdog's (and
// the abort timeout's timer is armed the same way), may fire anywhere up
// to 250 ms after its time, where PID 1 coalesces its wake-ups; the
// watchdog's runs at SD_EVENT_PRIORITY_IDLE besides ("process everything
// else which might be a sign of living before we consider a service
// died").
const sdEventAccuracy = 250 * time.Millisecond

// Attack: KillAllowance counts systemd's SIGABRT exactly WatchdogSec after
// the last ping and its SIGKILL exactly TimeoutAbortSec after that. PID 1
// arms both timers with sd-event's default accuracy, so each may fire up
// to 250 ms late by design, before any load on PID 1: the kill comes up to
// 500 ms after what the allowance counts. The frozen case keeps a third of
// the interval of slack (its last ping is no later than the freeze), which
// covers it with the packaged 2 s watchdog but not the fast profile's
// 500 ms; a busy or overdue loop (last ping up to a third after it got
// stuck) has none. The lease span's only other margin is clock drift (78 ms
// with the defaults, 6 ms in the fast profile).
//
// The test is TestSafeMinimumCoversAStuckLeader with the kill at the end
// of systemd's timer windows rather than at their start.
func TestBreakKillAllowanceIgnoresSystemdTimerSlack(t *testing.T) {
	fast := policy.Timing{Retry: 200 * time.Millisecond, RenewDeadline: 800 * time.Millisecond, StopWait: time.Second,
		ReplyMax: 150 * time.Millisecond, PollMin: 50 * time.Millisecond, PollMax: 100 * time.Millisecond}
	var failures []string
	for _, c := range []struct {
		name          string
		t             policy.Timing
		interval, abt time.Duration
	}{
		{"packaged", policy.DefaultTiming(), 2 * time.Second, time.Second},
		{"fast", fast, 500 * time.Millisecond, 100 * time.Millisecond},
	} {
		c.t.Allowance = KillAllowance(c.interval, c.abt)
		tm, err := c.t.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		const rho = float64(policy.DriftPPM) / 1e6
		deadline := tm.Retry + tm.RenewDeadline
		for _, kind := range []stuckKind{frozen, busy, overdue} {
			worst := time.Duration(0)
			for i := range 50 {
				phase := watchdogCheck(c.interval) * time.Duration(i) / 50
				// SIGABRT up to the accuracy after WatchdogSec, SIGKILL
				// up to the accuracy after TimeoutAbortSec.
				worst = max(worst, lastPing(kind, c.interval, phase, deadline)+c.interval+sdEventAccuracy+c.abt+sdEventAccuracy)
			}
			dead := time.Duration(float64(worst+tm.StopWait) * (1 + rho))
			took := time.Duration(float64(tm.LeaseSpan) * (1 - rho))
			if dead > took {
				failures = append(failures, fmt.Sprintf("%s (WatchdogSec %v, TimeoutAbortSec %v, allowance %v, lease span %v), %v at its deadline: "+
					"killed up to %v after the deadline, the unit dead %v after the renewal, %v after a standby may start",
					c.name, c.interval, c.abt, tm.Allowance, tm.LeaseSpan, kind, worst-deadline, dead, dead-took))
			}
		}
	}
	if len(failures) > 0 {
		t.Fatalf("systemd's watchdog and abort timers fire up to %v late each (sd-event's default accuracy):\n%s",
			sdEventAccuracy, strings.Join(failures, "\n"))
	}
}

// Attack (closed): the leader's deadline step is taken on time, and its
// StopUnit call hangs past stop_wait while the loop is idle (the stop runs
// outside any step; the lease's wake-up is Never while a stop and a
// renewal are outstanding). Before the stop carried its deadline
// (policy.Action.By), nothing the watchdog read moved: the daemon kept
// pinging, was never killed, and BindsTo= never stopped the unit, while
// the standby took over once the record stayed unchanged for the lease
// span. Now a stop systemd has not taken by the deadline is a loop that
// did not act: the last ping comes at most the check after the deadline.
func TestBreakWatchdogPingsWhileAStopHangs(t *testing.T) {
	const (
		interval = 600 * time.Millisecond
		abort    = 100 * time.Millisecond
	)
	synctest.Test(t, func(t *testing.T) {
		sd := &hangStop{fakeSystemd: newFakeSystemd(map[string]string{"db.service": "db"}), release: make(chan struct{})}
		store := &cutStore{memStore: newMemStore()}
		w, cancel := leadWatched(t, store, sd, testTiming, interval, abort, 30*time.Second)
		defer cancel()
		tm, p := w.tm, w.p
		// Redis unreachable from the leader, and systemd slow to take
		// the stop: the stop call hangs.
		cut := time.Now()
		sd.hang.Store(true)
		store.cut.Store(true)
		// The last successful renewal was sent before cut: its deadline
		// is before cut + retry + renew_deadline.
		bound := tm.Retry + tm.RenewDeadline + tm.Allowance + tm.StopWait
		time.Sleep(2 * tm.LeaseSpan)
		synctest.Wait()
		ps := p.all()
		active := sd.isActive("db.service")
		close(sd.release)
		cancel()
		last := ps[len(ps)-1]
		// KillAllowance counts on the last ping at most the check after
		// the deadline, itself at most retry + renew_deadline after cut.
		if late := last.Sub(cut) - (tm.Retry + tm.RenewDeadline); late > watchdogCheck(interval) {
			t.Fatalf("renewals failing since %v, StopUnit hanging: the last ping came %v after the latest deadline, past the check %v (gaps at most %v)",
				cut.Format("15:04:05"), late, watchdogCheck(interval), maxGap(ps, cut))
		}
		if active && time.Since(cut) > bound && last.Sub(cut) > bound-interval {
			t.Fatalf("renewals failing since %v, StopUnit hanging: %v later (twice the lease span %v; deadline + allowance + stop_wait is at most %v) "+
				"db.service still runs, the daemon still pings (last ping %v after the cut, gaps at most %v), so systemd never kills it "+
				"and BindsTo= never stops the unit, while a standby takes over at the lease span",
				cut.Format("15:04:05"), time.Since(cut), tm.LeaseSpan, bound, last.Sub(cut), maxGap(ps, cut))
		}
	})
}

// maxGap is the longest time between consecutive pings from from on
// (systemd would have killed the daemon if it exceeded the interval).
func maxGap(ps []time.Time, from time.Time) time.Duration {
	var g time.Duration
	for i := 1; i < len(ps); i++ {
		if ps[i].After(from) {
			g = max(g, ps[i].Sub(ps[i-1]))
		}
	}
	return g
}

// cutStore is memStore whose renewals fail while cut (Redis unreachable
// from the leader): the outcome is unknown.
type cutStore struct {
	*memStore
	cut atomic.Bool
}

func (c *cutStore) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	if c.cut.Load() {
		return policy.Record{}, redislease.ErrUnknown
	}
	return c.memStore.Renew(ctx, name, held)
}
