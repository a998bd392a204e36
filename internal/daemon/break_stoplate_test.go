package daemon

// Adversarial review of commit 267da82 (a stop the lease forced must be in
// systemd's hands by its deadline, or the watchdog withholds its ping),
// with the real watchdog goroutine on fake time. The tests here pass:
// each documents a step of the argument that held, or measures a margin.
// The ones that fail are in break_stoplate_open_test.go (breaks tag).

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// timeoutStop is fakeSystemd whose Stop, once hung, never reaches
// systemd: it waits stop_wait (unitctl.Stop's bound on its ctx: a
// StopUnit call that times out, or a connection retried until then) and
// returns an error, the unit still active, without calling OnQueued's
// function. With take set, the stop instead takes that long and succeeds
// (systemd answered StopUnit late; the stop itself is then quick).
type timeoutStop struct {
	*fakeSystemd
	hang  atomic.Bool
	take  atomic.Int64 // a time.Duration; 0: time out at stop_wait
	calls atomic.Int32
}

func (h *timeoutStop) Stop(ctx context.Context, unit string, stopWait time.Duration) error {
	if h.hang.Load() {
		h.calls.Add(1)
		if d := time.Duration(h.take.Load()); d > 0 {
			time.Sleep(d)
			return h.fakeSystemd.Stop(ctx, unit, stopWait)
		}
		time.Sleep(stopWait)
		return &unitctl.JobError{Unit: unit, Op: "stop", Err: unitctl.ErrStopFailed, Cause: context.DeadlineExceeded}
	}
	return h.fakeSystemd.Stop(ctx, unit, stopWait)
}

// stampStore is memStore whose renewals fail while cut, and that notes
// when the last renewal was sent (its deadline counts from the send).
type stampStore struct {
	*memStore
	cut  atomic.Bool
	mu   sync.Mutex
	last time.Time
}

func (s *stampStore) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	sent := time.Now()
	if s.cut.Load() {
		return policy.Record{}, redislease.ErrUnknown
	}
	rec, err := s.memStore.Renew(ctx, name, held)
	if err == nil {
		s.mu.Lock()
		s.last = sent
		s.mu.Unlock()
	}
	return rec, err
}

func (s *stampStore) lastSent() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// steal makes node-b the holder of name, as after Redis lost the key and
// a peer acquired it.
func (s *stampStore) steal(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.memStore.mu.Lock()
	defer s.memStore.mu.Unlock()
	cur := s.memStore.current(name)
	cur.Holder, cur.Version, cur.Token = "node-b", cur.Version+1, strings.Repeat("b", 32)
	s.memStore.write(name, cur)
}

// killedAt is when systemd's watchdog fires for pings ps, each at most
// interval + sd-event's accuracy apart or it fires, looking from from to
// end: the zero time if it never does.
func killedAt(ps []time.Time, from, end time.Time, interval time.Duration) time.Time {
	limit := interval + SystemdTimerSlack
	prev := time.Time{}
	for _, p := range ps {
		if !prev.IsZero() && !p.Before(from) && p.Sub(prev) > limit {
			return prev.Add(limit)
		}
		prev = p
	}
	if !prev.IsZero() && end.Sub(prev) > limit {
		return prev.Add(limit)
	}
	return time.Time{}
}

// stopTimesOut runs a daemon leading db with the real watchdog at
// interval, then cuts Redis off and has every StopUnit time out at
// stop_wait, never reaching systemd. It returns the deadline of the last
// renewal, when systemd would kill the daemon (zero: never, within two
// lease spans), and the timing.
func stopTimesOut(t *testing.T, timing policy.Timing, interval, abort time.Duration) (deadline, killed time.Time, tm policy.Timing) {
	sd := &timeoutStop{fakeSystemd: newFakeSystemd(map[string]string{"db.service": "db"})}
	store := &stampStore{memStore: newMemStore()}
	w, cancel := leadWatched(t, store, sd, timing, interval, abort, 0)
	defer cancel()
	tm, logs, p := w.tm, w.logs, w.p
	cut := time.Now()
	sd.hang.Store(true)
	store.cut.Store(true)
	time.Sleep(2 * tm.LeaseSpan)
	synctest.Wait()
	end := time.Now()
	deadline = store.lastSent().Add(tm.Retry + tm.RenewDeadline)
	killed = killedAt(p.all(), cut, end, interval)
	if !sd.isActive("db.service") {
		t.Fatal("the fake stop stopped the unit")
	}
	if sd.calls.Load() == 0 {
		t.Fatalf("no stop called:\n%s", logs)
	}
	cancel()
	sd.hang.Store(false)
	time.Sleep(tm.StopWait) // the stop calls under way return
	synctest.Wait()
	return deadline, killed, tm
}

// Probe (holds for the packaged and the fast profile): StopUnit never
// reaches systemd and times out at stop_wait. The pending stop is late
// from the check/2 after the deadline until the call returns; stop_wait
// is longer than WatchdogSec + the check, so systemd kills the daemon
// within the allowance of the deadline, before the returned call clears
// the pending stop. (With a WatchdogSec longer than stop_wait it does
// not: TestBreakStopLateErrorAtStopWaitResumesPings.)
func TestBreakStopLateTimeoutKilledFirstInShippedProfiles(t *testing.T) {
	fast := policy.Timing{Retry: 200 * time.Millisecond, RenewDeadline: 600 * time.Millisecond, StopWait: time.Second,
		ReplyMax: 150 * time.Millisecond, PollMin: 50 * time.Millisecond, PollMax: 100 * time.Millisecond}
	for _, c := range []struct {
		name            string
		timing          policy.Timing
		interval, abort time.Duration
	}{
		{"packaged", policy.DefaultTiming(), 2 * time.Second, time.Second},
		{"fast", fast, 450 * time.Millisecond, 100 * time.Millisecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			deadline, killed, tm := stopTimesOut(t, c.timing, c.interval, c.abort)
			if killed.IsZero() {
				t.Fatalf("%s: StopUnit timing out at stop_wait %v: systemd never kills the daemon", c.name, tm.StopWait)
			}
			if late := killed.Sub(deadline); late > c.interval+watchdogCheck(c.interval)+SystemdTimerSlack {
				t.Fatalf("%s: killed %v after the deadline, past WatchdogSec + the check + slack", c.name, late)
			}
			t.Logf("%s: SIGABRT %v after the deadline (stop_wait %v)", c.name, killed.Sub(deadline), tm.StopWait)
		})
	}
}

// Probe (holds): the lease is lost (RenewLost: the key was lost and a
// peer acquired it), and the stop hangs before systemd has it: the
// pending stop carries the deadline of the last renewal, and the last
// ping comes at most the check after it.
func TestBreakStopLateLossWithoutReload(t *testing.T) {
	const interval = 600 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		deadline, last, _ := lossThenHang(t, interval, nil)
		if late := last.Sub(deadline); late > watchdogCheck(interval) {
			t.Fatalf("lease lost, StopUnit hanging: last ping %v after the deadline, past the check %v", late, watchdogCheck(interval))
		}
	})
}

// lossThenHang runs a daemon leading db, has StopUnit hang (deaf to its
// ctx), then a peer take the lease; after the loss is seen it calls
// between (if not nil) and runs two lease spans. It returns the deadline
// of the last renewal and the last ping.
func lossThenHang(t *testing.T, interval time.Duration, between func(ctx context.Context, d *Daemon, sd *hangStop)) (deadline, last time.Time, logs *syncBuffer) {
	sd := &hangStop{fakeSystemd: newFakeSystemd(map[string]string{"db.service": "db"}), release: make(chan struct{})}
	store := &stampStore{memStore: newMemStore()}
	defer close(sd.release)
	w, cancel := leadWatched(t, store, sd, testTiming, interval, 100*time.Millisecond, 30*time.Second)
	defer cancel()
	d, ctx, tm, p := w.d, w.ctx, w.tm, w.p
	logs = w.logs
	sd.hang.Store(true)
	store.steal("db")
	for !strings.Contains(logs.String(), "lost") {
		time.Sleep(10 * time.Millisecond)
	}
	synctest.Wait()
	if s := d.find("db"); s == nil || s.Holding() {
		t.Fatalf("the loss not seen:\n%s", logs)
	}
	if between != nil {
		between(ctx, d, sd)
	}
	time.Sleep(2 * tm.LeaseSpan)
	synctest.Wait()
	if !sd.isActive("db.service") {
		t.Fatalf("the hung stop stopped the unit:\n%s", logs)
	}
	ps := p.all()
	return store.lastSent().Add(tm.Retry + tm.RenewDeadline), ps[len(ps)-1], logs
}

// Probe (the false alarm of a stale By, closed): a handoff's stop was due
// by the deadline of the renewal before the handoff, while renewals went
// on succeeding during a long StopUnit call (systemd slow to answer; the
// stop itself then quick); a call longer than renew_deadline - reply_max
// had systemd kill the daemon (and stop every unit on the node through
// BindsTo=) though no peer could take the lease. The pending stop's
// deadline now moves with every renewal while the node holds the lease:
// for each profile, and a handoff right after a renewal and right before
// the next, a StopUnit call up to three times retry + renew_deadline long
// never has the daemon killed.
func TestBreakStopLateStaleByThreshold(t *testing.T) {
	fast := policy.Timing{Retry: 200 * time.Millisecond, RenewDeadline: 600 * time.Millisecond, StopWait: time.Second,
		ReplyMax: 150 * time.Millisecond, PollMin: 50 * time.Millisecond, PollMax: 100 * time.Millisecond}
	for _, c := range []struct {
		name            string
		timing          policy.Timing
		interval, abort time.Duration
	}{
		{"packaged", policy.DefaultTiming(), 2 * time.Second, time.Second},
		{"fast", fast, 450 * time.Millisecond, 100 * time.Millisecond},
	} {
		for _, phase := range []float64{0.05, 0.95} {
			long := c.timing.Retry + c.timing.RenewDeadline
			for _, take := range []time.Duration{c.timing.RenewDeadline, long, 3 * long} {
				var killed bool
				synctest.Test(t, func(t *testing.T) {
					killed = handoffSlowStop(t, c.timing, c.interval, c.abort, phase, take)
				})
				if killed {
					t.Errorf("%s: a StopUnit call of %v during a handoff %.0f%% into the retry period, renewals succeeding, had the daemon killed",
						c.name, take, phase*100)
				}
			}
		}
	}
}

// handoffSlowStop hands a lease off at phase of the retry period after a
// renewal, the StopUnit call taking take, renewals succeeding; it reports
// whether systemd would kill the daemon.
func handoffSlowStop(t *testing.T, timing policy.Timing, interval, abort time.Duration, phase float64, take time.Duration) bool {
	sd := &timeoutStop{fakeSystemd: newFakeSystemd(map[string]string{"db.service": "db"})}
	store := &stampStore{memStore: newMemStore()}
	w, cancel := leadWatched(t, store, sd, timing, interval, abort, 0)
	defer cancel()
	d, ctx, tm, logs, p := w.d, w.ctx, w.tm, w.logs, w.p
	since := time.Now()
	for !store.lastSent().After(since) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(time.Duration(phase * float64(tm.Retry)))
	sd.take.Store(int64(take))
	sd.hang.Store(true)
	from := time.Now()
	d.find("db").Handoff(ctx)
	time.Sleep(take + 2*interval)
	synctest.Wait()
	if strings.Contains(logs.String(), "renew_failed") {
		t.Fatalf("a renewal failed: this probe wants them all to succeed:\n%s", logs)
	}
	return !killedAt(p.all(), from, time.Now(), interval).IsZero()
}
