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
	"log/slog"
	"math"
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

// Probe (holds): a loop whose step hangs right after a watchdog tick's
// check, with each ping delivered at its check, has its last ping within
// a third of the interval of the hang, as KillAllowance counts on.
func TestBreakWatchdogPingDeliveredAtItsCheck(t *testing.T) {
	const interval = 3 * time.Second
	synctest.Test(t, func(t *testing.T) {
		stuck, ps := hangAfterRenewal(t, interval, 0)
		if last := ps[len(ps)-1]; last.Sub(stuck) > watchdogCheck(interval) {
			t.Fatalf("last ping %v after the loop got stuck, over the check %v", last.Sub(stuck), watchdogCheck(interval))
		}
	})
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
			if a < wd+watchdogCheck(wd)+ab || a > wd+watchdogCheck(wd)+ab+time.Millisecond+1 || a <= 0 {
				t.Errorf("KillAllowance(%v, %v) = %v; watchdog + check + abort = %v", wd, ab, a, wd+watchdogCheck(wd)+ab)
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
