package supervisor

// Adversarial review of commit aa62f5d: carry hands a step's first action,
// when it is a unit's start or stop, to a goroutine of its own, which runs
// the job and then delivers its result (deliver: flushEligibility, step,
// carry); before, the goroutine that stepped ran the job itself and
// stepped its result with step directly.
//
// Every test here is named TestBreakCarry...; run them with
//
//	go test -race -count=1 -run BreakCarry ./internal/supervisor
//
// The fakes model systemd as the daemon's adapter does: a stop of a unit
// whose start is under way replaces the start (the start returns an
// error), and every start passes the unit's guard (ExecStartPre=), which
// admits it only while the supervisor's published status is starting and
// holding (Daemon.Guard). They record every violation of the safety rule
// they can see: a start admitted while the store's record is not this
// node's held record, two starts or two stops of one unit at once, a
// release while a unit runs or its stop is under way.
//
// Each test's comment says what it attacks and whether it held. No test
// found a safety bug in aa62f5d: every one passes on it. Every test was
// also run on the parent commit 8f228cb (the file copied into a tree of
// it): all pass there too but one subtest, which pins a difference the
// commit makes on purpose or not (see
// TestBreakCarryEligibilityFlushedBeforeTheJobsResult/eligible during the
// startup stop: the flag is now taken with the stop's result, before it
// at the next tick).
//
// Checked for strength by mutating the new goroutine in a copy of the
// tree: dropping a stop's result, reporting a stop stopped before running
// it, or reporting a failed stop as stopped, each makes several of these
// tests fail; delivering a result twice does not (the machine ignores a
// result that answers no outstanding job, and nothing here can see it).
// Delaying every start by 3s of fake time before it runs is caught by
// the random test only when the fake guard is switched off: a late start
// is made safe by the guard, as it was before the commit (a start already
// waited for StartOrder's D-Bus call and for its slot in unitctl).

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// bcUnits is a group of units under a fake systemd with a guard.
type bcUnits struct {
	sup        atomic.Pointer[Supervisor] // the guard reads its status
	store      *fakeStore                 // checked at every admitted start, if checkStore
	checkStore bool

	mu         sync.Mutex
	running    map[string]bool
	inStart    map[string]int
	inStop     map[string]int
	replaced   map[string]chan struct{} // closed by a stop: the start under way fails
	replace    bool                     // a stop replaces a start under way (systemd's replace mode)
	startGate  map[string]chan struct{} // a unit's admitted start waits for it
	stopGate   chan struct{}            // every stop waits for it, if set
	queueFirst bool                     // a stop tells queued before it waits
	startFail  map[string]bool
	stopFail   map[string]bool
	envs       []Env

	startCalls, admitted, refused, started, stopCalls, stopped int
	trace                                                      []string
	bad                                                        []string
}

func newBcUnits() *bcUnits {
	return &bcUnits{running: map[string]bool{}, inStart: map[string]int{}, inStop: map[string]int{},
		replaced: map[string]chan struct{}{}, replace: true, startGate: map[string]chan struct{}{},
		startFail: map[string]bool{}, stopFail: map[string]bool{}}
}

func (u *bcUnits) violation(format string, args ...any) {
	u.bad = append(u.bad, fmt.Sprintf(format, args...)) // under u.mu
}

func (u *bcUnits) StartOrder(_ context.Context, units []string) ([]string, error) {
	return units, nil
}

func (u *bcUnits) Start(ctx context.Context, unit string, env Env) error {
	if err := ctx.Err(); err != nil {
		// As unitctl's start waiting for its slot on an ended ctx (the
		// supervisor's, after its end): no job is queued. (unitctl may
		// also take a free slot then; see the report.)
		return fmt.Errorf("%s: %w", unit, err)
	}
	u.mu.Lock()
	u.startCalls++
	// The guard (ExecStartPre=) first: a start it refuses never runs.
	st := u.sup.Load().Status()
	if st.Role != policy.Starting.String() || !st.Holding {
		u.refused++
		u.trace = append(u.trace, "refused "+unit)
		u.mu.Unlock()
		return fmt.Errorf("%s: the guard refused the start: %s, holding %t", unit, st.Role, st.Holding)
	}
	if u.inStart[unit] > 0 {
		u.violation("two starts of %s at once", unit)
	}
	if u.inStop[unit] > 0 {
		u.violation("start of %s admitted while its stop is under way", unit)
	}
	if env.Token != st.Token {
		u.violation("start of %s with token %d in a tenure of token %d", unit, env.Token, st.Token)
	}
	if u.checkStore {
		rec, _ := u.store.holderRecord()
		if !rec.Present || rec.Released || rec.Holder != "node-a" || env.Token == 0 {
			u.violation("start of %s admitted while the record is %v (token %d)", unit, rec, env.Token)
		}
	}
	u.admitted++
	u.inStart[unit]++
	u.running[unit] = true // systemd has the job: the unit is as good as active
	u.envs = append(u.envs, env)
	u.trace = append(u.trace, "start "+unit)
	rep := make(chan struct{})
	u.replaced[unit] = rep
	gate := u.startGate[unit]
	fail := u.startFail[unit]
	u.mu.Unlock()
	var err error
	if gate != nil {
		select {
		case <-gate:
		case <-rep:
			err = fmt.Errorf("%s: start job replaced by a stop", unit)
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.inStart[unit]--
	if u.replaced[unit] == rep {
		delete(u.replaced, unit)
	}
	if err == nil && fail {
		err = fmt.Errorf("%s: start failed", unit)
		u.running[unit] = false
	}
	if err == nil {
		u.started++
		u.trace = append(u.trace, "started "+unit)
	}
	return err
}

func (u *bcUnits) Stop(_ context.Context, unit string, queued func()) (bool, error) {
	u.mu.Lock()
	u.stopCalls++
	if u.inStop[unit] > 0 {
		u.violation("two stops of %s at once", unit)
	}
	u.inStop[unit]++
	if rep := u.replaced[unit]; rep != nil && u.replace {
		close(rep)
		delete(u.replaced, unit)
	}
	gate, queue := u.stopGate, u.queueFirst
	u.trace = append(u.trace, "stop "+unit)
	u.mu.Unlock()
	if queue && queued != nil {
		queued()
	}
	if gate != nil {
		<-gate
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.inStop[unit]--
	if u.stopFail[unit] {
		u.trace = append(u.trace, "stop_failed "+unit)
		return true, fmt.Errorf("%s: still active after SIGKILL", unit)
	}
	u.running[unit] = false
	u.stopped++
	u.trace = append(u.trace, "stopped "+unit)
	return false, nil
}

// with runs f under the units' lock.
func (u *bcUnits) with(f func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f()
}

// gateStart makes the next admitted starts of unit wait for the gate it
// returns (closed by openStarts).
func (u *bcUnits) gateStart(unit string) {
	u.with(func() {
		if u.startGate[unit] == nil {
			u.startGate[unit] = make(chan struct{})
		}
	})
}

func (u *bcUnits) openStarts() {
	u.with(func() {
		for k, g := range u.startGate {
			close(g)
			delete(u.startGate, k)
		}
	})
}

func (u *bcUnits) gateStops() {
	u.with(func() {
		if u.stopGate == nil {
			u.stopGate = make(chan struct{})
		}
	})
}

func (u *bcUnits) openStops() {
	u.with(func() {
		if u.stopGate != nil {
			close(u.stopGate)
			u.stopGate = nil
		}
	})
}

func (u *bcUnits) openAll() {
	u.openStarts()
	u.openStops()
}

func (u *bcUnits) runningUnits() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var r []string
	for k, on := range u.running {
		if on {
			r = append(r, k)
		}
	}
	slices.Sort(r)
	return r
}

func (u *bcUnits) starting(unit string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.inStart[unit]
}

func (u *bcUnits) stoppingNow() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, c := range u.inStop {
		n += c
	}
	return n
}

type bcCounts struct{ startCalls, admitted, refused, started, stopCalls, stopped int }

func (u *bcUnits) counts() bcCounts {
	u.mu.Lock()
	defer u.mu.Unlock()
	return bcCounts{u.startCalls, u.admitted, u.refused, u.started, u.stopCalls, u.stopped}
}

func (u *bcUnits) traced() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.trace)
}

// check fails the test with every violation recorded.
func (u *bcUnits) check(t *testing.T) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, b := range u.bad {
		t.Errorf("safety: %s\ntrace: %v", b, u.trace)
	}
	u.bad = nil
}

// holderRecord reads the key as the store has it.
func (f *fakeStore) holderRecord() (policy.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current()
}

// bcStore is fakeStore that counts its requests and checks every release
// against the units: none may run, none may be stopping, no start may be
// under way.
type bcStore struct {
	*fakeStore
	u                                     *bcUnits
	observes, acquires, renews, releaseNo atomic.Int32
}

func (b *bcStore) Observe(ctx context.Context, name string) (policy.Record, error) {
	b.observes.Add(1)
	return b.fakeStore.Observe(ctx, name)
}

func (b *bcStore) Acquire(ctx context.Context, name string, seen policy.Record) (policy.Record, error) {
	b.acquires.Add(1)
	return b.fakeStore.Acquire(ctx, name, seen)
}

func (b *bcStore) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	b.renews.Add(1)
	return b.fakeStore.Renew(ctx, name, held)
}

func (b *bcStore) Release(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	b.releaseNo.Add(1)
	b.u.with(func() {
		b.u.trace = append(b.u.trace, "release")
		for k, on := range b.u.running {
			if on {
				b.u.violation("release of %v while %s runs", held, k)
			}
		}
		for k, n := range b.u.inStop {
			if n > 0 {
				b.u.violation("release of %v while %s's stop is under way", held, k)
			}
		}
		for k, n := range b.u.inStart {
			// Under replace, a stop ended every start under way; without
			// it a start under way is one whose answer alone is late.
			if n > 0 && b.u.replace && b.u.replaced[k] != nil {
				b.u.violation("release of %v while %s's start is under way", held, k)
			}
		}
	})
	return b.fakeStore.Release(ctx, name, held)
}

func (b *bcStore) setCut(cut bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cut = cut
}

func (b *bcStore) requests() int32 {
	return b.observes.Load() + b.acquires.Load() + b.renews.Load() + b.releaseNo.Load()
}

// bcSup is a supervisor under test with its fakes and journal.
type bcSup struct {
	s     *Supervisor
	u     *bcUnits
	store *bcStore
	logs  *syncBuffer
	clock Clock
	end   func()
}

// bcLaunch launches a supervisor of units over fresh fakes (prepare, if
// not nil, sets them up first).
func bcLaunch(t *testing.T, cfg policy.Config, units []string, prepare func(*bcSup)) *bcSup {
	t.Helper()
	cfg.Timing = testTiming
	m, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := newBcUnits()
	b := &bcSup{u: u, store: &bcStore{fakeStore: &fakeStore{t: t}, u: u}, logs: &syncBuffer{}, clock: BootClock()}
	u.store = b.store.fakeStore
	b.s = New("demo", units, "node-a", m, b.store, u, b.clock, logging.Text(b.logs, slog.LevelDebug))
	u.sup.Store(b.s)
	if prepare != nil {
		prepare(b)
	}
	b.end = b.s.Launch(context.WithoutCancel(t.Context()))
	return b
}

// finish opens every gate, ends the supervisor and lets every goroutine
// of the bubble end; then it reports the units' violations.
func (b *bcSup) finish(t *testing.T) {
	t.Helper()
	b.u.openAll()
	b.end()
	synctest.Wait()
	b.u.check(t)
}

// journaled counts the journal entries of event ev.
func (b *bcSup) journaled(ev string) int {
	return strings.Count(b.logs.String(), "UNITLEASE_EVENT="+ev+" ")
}

// until advances fake time by small steps until cond holds, at most d;
// it reports whether cond held.
func until(d time.Duration, cond func() bool) bool {
	for waited := time.Duration(0); ; waited += 100 * time.Millisecond {
		synctest.Wait()
		if cond() {
			return true
		}
		if waited >= d {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parkedStart launches a supervisor whose first start (of the first unit)
// waits at its gate, and returns it once that start is under way.
func parkedStart(t *testing.T, cfg policy.Config, units []string, prepare func(*bcSup)) *bcSup {
	t.Helper()
	b := bcLaunch(t, cfg, units, func(b *bcSup) {
		b.u.gateStart(units[0])
		if prepare != nil {
			prepare(b)
		}
	})
	if !until(time.Minute, func() bool { return b.u.starting(units[0]) == 1 }) {
		b.finish(t)
		t.Fatalf("no start under way after a minute: %+v", b.s.Status())
	}
	if st := b.s.Status(); st.Role != policy.Starting.String() || !st.Holding {
		b.finish(t)
		t.Fatalf("start under way, status %+v", st)
	}
	return b
}

// TestBreakCarryParkedStartSurvivesEventsAndIsSteppedOnce: a start that
// waits long for its turn, on the job's own goroutine, while renewals go
// on (the lease is held throughout) and every other event that can come
// then arrives: nudges, wakes, an eligibility that is no change, a
// withdraw and a compete, a deferral. None of them makes the machine stop
// or start anything else; the watchdog sees nothing busy, overdue or late
// for the whole wait. Once the start returns, its result is stepped
// exactly once (one journalled started, leader), and the machine renews
// on; a later handoff stops, then releases, once.
//
// Held.
func TestBreakCarryParkedStartSurvivesEventsAndIsSteppedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := parkedStart(t, policy.Config{Seed: 7}, []string{"demo.service"}, nil)
		defer b.finish(t)
		ctx := t.Context()
		renews := b.store.renews.Load()
		for i := range 20 {
			b.s.Nudge()
			b.s.Wake()
			b.s.SetEligibleSoon(true) // already eligible: no change
			b.s.SetWithdrawn(ctx, i%2 == 0)
			b.s.SetDelay(ctx, time.Duration(i%3)*time.Second)
			time.Sleep(500 * time.Millisecond)
			synctest.Wait()
			if now := b.clock(); b.s.Busy(now, 0) || b.s.Overdue(now, 10*time.Millisecond) || b.s.StopLate(now, 0) {
				t.Fatalf("while the start waits: busy %t, overdue %t, stop late %t", b.s.Busy(now, 0), b.s.Overdue(now, 10*time.Millisecond), b.s.StopLate(now, 0))
			}
		}
		b.s.SetWithdrawn(ctx, false)
		b.s.SetDelay(ctx, 0)
		synctest.Wait()
		if st := b.s.Status(); st.Role != policy.Starting.String() || !st.Holding || b.store.renews.Load() <= renews {
			t.Fatalf("10s of events while the start waits: status %+v, %d renewals; want starting, holding, renewing", st, b.store.renews.Load()-renews)
		}
		if c := b.u.counts(); c.startCalls != 1 || c.stopCalls != 1 {
			t.Fatalf("while the start waits: %+v; want the startup stop and this start only", c)
		}
		b.u.openStarts()
		synctest.Wait()
		if st := b.s.Status(); st.Role != policy.Leader.String() || b.journaled("started") != 1 {
			t.Fatalf("the start returned: status %+v, %d started entries; want leader, one", st, b.journaled("started"))
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if c := b.u.counts(); c.startCalls != 1 || c.started != 1 || b.journaled("started") != 1 || b.s.Status().Role != policy.Leader.String() {
			t.Fatalf("30s on: %+v, %d started entries, status %+v", c, b.journaled("started"), b.s.Status())
		}
		b.s.Handoff(ctx)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if r := b.u.runningUnits(); len(r) != 0 || b.store.releaseNo.Load() != 1 || b.s.Holding() {
			t.Fatalf("after the handoff: running %v, %d releases, holding %t", r, b.store.releaseNo.Load(), b.s.Holding())
		}
	})
}

// TestBreakCarryHandoffWhileTheStartIsParked: a handoff comes while the
// start waits on its goroutine, so the stop's goroutine and the start's
// run at once and their results race to the machine:
//
//   - the stop replaces the start (systemd's replace mode): whichever
//     result comes first, the start's failure is not taken for the unit's
//     (no unit_failed), the release comes after the stop, once;
//   - the stop waits too, and the start's success comes back first: it is
//     not taken (no started, no leader), nothing is released while the
//     stop waits; once it returns, the release follows;
//   - the same with the stop failing: never released, stop_failed,
//     holding.
//
// Never a second start.
//
// Held.
func TestBreakCarryHandoffWhileTheStartIsParked(t *testing.T) {
	t.Run("stop replaces the start", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var failed atomic.Int32
			b := parkedStart(t, policy.Config{Seed: 7}, []string{"demo.service"}, func(b *bcSup) {
				b.s.SetHooks(hookFuncs{unitFailed: func() { failed.Add(1) }})
			})
			defer b.finish(t)
			b.s.Handoff(t.Context())
			synctest.Wait()
			st := b.s.Status()
			if st.Holding || b.store.releaseNo.Load() != 1 || len(b.u.runningUnits()) != 0 {
				t.Fatalf("handoff over a start under way: %+v, %d releases, running %v", st, b.store.releaseNo.Load(), b.u.runningUnits())
			}
			if failed.Load() != 0 || b.journaled("unit_failed") != 0 || b.journaled("started") != 0 {
				t.Fatalf("the replaced start's result was taken: %d unit_failed, %d started\n%s", b.journaled("unit_failed"), b.journaled("started"), b.logs)
			}
			tr := b.u.traced()
			if i, j := slices.Index(tr, "stopped demo.service"), slices.Index(tr, "release"); i < 0 || j < i {
				t.Fatalf("release not after the stop: %v", tr)
			}
			time.Sleep(testTiming.StopWait)
			synctest.Wait()
			if c := b.u.counts(); c.admitted != 1 {
				t.Fatalf("%d starts admitted, want one: %v", c.admitted, b.u.traced())
			}
		})
	})
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("start result first, stop waits, stop fails %t", fail), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := parkedStart(t, policy.Config{Seed: 7}, []string{"demo.service"}, func(b *bcSup) {
					b.u.replace = false // the start got through: only its answer is late
				})
				defer b.finish(t)
				b.u.gateStops()
				b.u.with(func() { b.u.stopFail["demo.service"] = fail })
				b.s.Handoff(t.Context())
				synctest.Wait()
				b.u.openStarts()
				time.Sleep(time.Second)
				synctest.Wait()
				st := b.s.Status()
				if st.Role != policy.Stopping.String() || !st.Holding || b.store.releaseNo.Load() != 0 || b.journaled("started") != 0 {
					t.Fatalf("the start's success came during the stop: %+v, %d releases, %d started", st, b.store.releaseNo.Load(), b.journaled("started"))
				}
				b.u.openStops()
				time.Sleep(time.Second)
				synctest.Wait()
				st = b.s.Status()
				switch {
				case fail && (st.Role != policy.StopFailed.String() || !st.Holding || b.store.releaseNo.Load() != 0):
					t.Fatalf("the stop failed: %+v, %d releases; want stop_failed, holding, none", st, b.store.releaseNo.Load())
				case !fail && (st.Holding || b.store.releaseNo.Load() != 1 || len(b.u.runningUnits()) != 0):
					t.Fatalf("the stop returned: %+v, %d releases, running %v", st, b.store.releaseNo.Load(), b.u.runningUnits())
				}
				if c := b.u.counts(); c.admitted != 1 {
					t.Fatalf("%d starts admitted, want one: %v", c.admitted, b.u.traced())
				}
				if fail {
					b.u.with(func() { b.u.stopFail["demo.service"] = false })
				}
			})
		})
	}
}

// TestBreakCarryLossOrDeadlineWhileTheStartIsParked: while the start
// waits, the lease is lost (a renewal finds another holder) or Redis is
// cut off until the deadline passes. The stop runs at once on a goroutine
// of its own and replaces the start; a lost lease is never released, a
// deadline's is released only after the stop. The stop that the deadline
// forced and that waits before systemd has it is late for the watchdog
// (StopLate) once past the deadline, and not once systemd has it; the
// supervisor is never busy or overdue meanwhile.
//
// Held.
func TestBreakCarryLossOrDeadlineWhileTheStartIsParked(t *testing.T) {
	t.Run("lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := parkedStart(t, policy.Config{Seed: 7}, []string{"demo.service"}, nil)
			defer b.finish(t)
			b.store.steal()
			time.Sleep(testTiming.Retry + testTiming.ReplyMax)
			synctest.Wait()
			if st := b.s.Status(); st.Holding || len(b.u.runningUnits()) != 0 || b.store.releaseNo.Load() != 0 || b.journaled("lost") != 1 {
				t.Fatalf("lost while starting: %+v, running %v, %d releases, %d lost entries", st, b.u.runningUnits(), b.store.releaseNo.Load(), b.journaled("lost"))
			}
		})
	})
	for _, queue := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadline, stop queued at once %t", queue), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := parkedStart(t, policy.Config{Seed: 7}, []string{"demo.service"}, nil)
				defer b.finish(t)
				b.u.gateStops()
				b.u.with(func() { b.u.queueFirst = queue })
				b.store.setCut(true)
				deadline, _ := func() (policy.Instant, bool) {
					b.s.mu.Lock()
					defer b.s.mu.Unlock()
					return b.s.machine.Deadline()
				}()
				time.Sleep(testTiming.Retry + testTiming.RenewDeadline + time.Second)
				synctest.Wait()
				now := b.clock()
				if now < deadline.Add(time.Second/2) {
					t.Fatalf("the test slept to %v, before its deadline %v", now, deadline)
				}
				st := b.s.Status()
				if st.Role != policy.Stopping.String() || b.u.stoppingNow() != 1 {
					t.Fatalf("past the deadline: %+v, %d stops under way", st, b.u.stoppingNow())
				}
				if late := b.s.StopLate(now, 100*time.Millisecond); late == queue {
					t.Fatalf("stop under way past the deadline, systemd has it %t: late %t", queue, late)
				}
				if b.s.Busy(now, 0) || b.s.Overdue(now, 10*time.Millisecond) {
					t.Fatalf("the stop waits on its goroutine: busy %t, overdue %t", b.s.Busy(now, 0), b.s.Overdue(now, 10*time.Millisecond))
				}
				if b.store.releaseNo.Load() != 0 {
					t.Fatal("released while the stop waits")
				}
				b.u.openStops()
				time.Sleep(time.Second)
				synctest.Wait()
				if b.s.StopPending() || b.s.StopLate(b.clock(), 0) || len(b.u.runningUnits()) != 0 || b.s.Holding() {
					t.Fatalf("the stop returned: pending %t, running %v, holding %t", b.s.StopPending(), b.u.runningUnits(), b.s.Holding())
				}
			})
		})
	}
}

// TestBreakCarryEligibilityFlushedBeforeTheJobsResult: SetEligibleSoon
// sets the flag while a job waits on its goroutine. On aa62f5d that
// goroutine stepped the flag (deliver's flushEligibility) before the
// job's result: a start's success then went without its "started" entry,
// a start's failure without its unit_failed entry and Hooks.UnitFailed (the
// daemon's count of the unit's failures missed it), and an eligibility
// set during the startup stop was taken with the stop's result. Safe, but
// not the order before: the job's goroutine now steps the result first,
// as before aa62f5d, and the flag comes with the next event.
//
//   - ineligible before a start's success: "started" is journalled, then
//     the flag stops the leader; released after the stop, never started
//     again.
//   - ineligible before a start's failure: unit_failed is journalled and
//     Hooks.UnitFailed called once.
//   - eligible (the daemon's call) during the startup stop of a machine
//     that began ineligible: the stop is confirmed before anything is
//     observed, and the acquisition still waits a lease span from the
//     first observation after it.
func TestBreakCarryEligibilityFlushedBeforeTheJobsResult(t *testing.T) {
	for _, startFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("ineligible, start fails %t", startFails), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var failed atomic.Int32
				b := parkedStart(t, policy.Config{Seed: 7}, []string{"demo.service"}, func(b *bcSup) {
					b.s.SetHooks(hookFuncs{unitFailed: func() { failed.Add(1) }})
					b.u.startFail["demo.service"] = startFails
				})
				defer b.finish(t)
				b.s.SetEligibleSoon(false)
				b.u.openStarts() // no tick comes in between: the synctest bubble runs every goroutine first
				synctest.Wait()
				time.Sleep(2 * time.Second)
				synctest.Wait()
				st := b.s.Status()
				if st.Holding || len(b.u.runningUnits()) != 0 || b.store.releaseNo.Load() != 1 {
					t.Fatalf("ineligible: %+v, running %v, %d releases", st, b.u.runningUnits(), b.store.releaseNo.Load())
				}
				wantStarted, wantFailed := 1, 0
				if startFails {
					wantStarted, wantFailed = 0, 1
				}
				if b.journaled("started") != wantStarted || b.journaled("unit_failed") != wantFailed || int(failed.Load()) != wantFailed {
					t.Fatalf("start fails %t: %d started, %d unit_failed entries, Hooks.UnitFailed %d times; want %d, %d, %d: the job's result was not stepped before the flag",
						startFails, b.journaled("started"), b.journaled("unit_failed"), failed.Load(), wantStarted, wantFailed, wantFailed)
				}
				time.Sleep(5 * time.Minute)
				synctest.Wait()
				if c := b.u.counts(); c.admitted != 1 || b.s.Holding() {
					t.Fatalf("ineligible for good, yet %d starts admitted, holding %t", c.admitted, b.s.Holding())
				}
			})
		})
	}
	t.Run("eligible during the startup stop", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := bcLaunch(t, policy.Config{Seed: 7, Ineligible: true}, []string{"demo.service"}, func(b *bcSup) {
				b.u.stopGate = make(chan struct{})
			})
			defer b.finish(t)
			synctest.Wait()
			if b.u.stoppingNow() != 1 {
				t.Fatalf("the startup stop is not under way: %d", b.u.stoppingNow())
			}
			b.s.SetEligibleSoon(true)
			tm, _ := testTiming.Resolved()
			time.Sleep(3 * tm.CrashBound())
			synctest.Wait()
			if n := b.store.requests(); n != 0 {
				t.Fatalf("%d store requests while the startup stop waits", n)
			}
			b.u.openStops()
			synctest.Wait()
			time.Sleep(tm.LeaseSpan - tm.PollMax)
			synctest.Wait()
			if b.store.acquires.Load() != 0 {
				t.Fatal("acquired within a lease span of the first observation")
			}
			if !until(2*tm.CrashBound(), func() bool { return b.s.Status().Role == policy.Leader.String() }) {
				t.Fatalf("never led: %+v", b.s.Status())
			}
		})
	})
}

// TestBreakCarryEndWhileAJobIsParked: the supervisor ends (Launch's end)
// while a job waits on its goroutine: the startup stop, a start, a
// handoff's stop (due by a deadline). end returns with Done closed and
// does not wait for the job; the job goes on (a stop to its end, with a
// live ctx; a start with the ended one, on which the group's next unit
// is not started); its result is dropped: no step, no step's journal
// entry, no store request after the end. A deadline's stop
// stays pending for the watchdog until it gets through, then not.
//
// Held.
func TestBreakCarryEndWhileAJobIsParked(t *testing.T) {
	for _, c := range []string{"startup stop", "start", "handoff stop"} {
		t.Run(c, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var b *bcSup
				switch c {
				case "startup stop":
					b = bcLaunch(t, policy.Config{Seed: 7}, []string{"a.service", "b.service"}, func(b *bcSup) { b.u.stopGate = make(chan struct{}) })
					synctest.Wait()
				case "start":
					b = parkedStart(t, policy.Config{Seed: 7}, []string{"a.service", "b.service"}, nil)
				case "handoff stop":
					b = parkedStart(t, policy.Config{Seed: 7}, []string{"a.service", "b.service"}, nil)
					b.u.openStarts()
					synctest.Wait()
					b.u.gateStops()
					b.s.Handoff(t.Context())
					synctest.Wait()
					if !b.s.StopPending() {
						t.Fatal("a handoff's stop waits before systemd has it, and is not pending")
					}
				}
				defer b.finish(t)
				b.end()
				if !blDoneNow(b.s) {
					t.Fatal("end returned, Done not closed")
				}
				logged, requests, cts := len(b.logs.String()), b.store.requests(), b.u.counts()
				b.u.openAll()
				synctest.Wait()
				time.Sleep(time.Minute)
				synctest.Wait()
				if later := b.logs.String()[logged:]; strings.Contains(later, "UNITLEASE_STATE=") {
					// A step's entries carry the state; an action's own
					// warnings (a start that failed on the ended ctx) do not.
					t.Fatalf("steps journalled after the end:\n%s", later)
				}
				if n := b.store.requests(); n != requests {
					t.Fatalf("%d store requests after the end", n-requests)
				}
				after := b.u.counts()
				if after.startCalls != cts.startCalls || after.admitted != cts.admitted {
					t.Fatalf("starts after the end: %+v then %+v", cts, after)
				}
				if b.s.StopPending() || b.s.StopLate(b.clock(), 0) {
					t.Fatal("the stop got through after the end, and is still pending")
				}
				if c != "start" && b.u.stoppingNow() != 0 {
					t.Fatal("a stop under way at the end never returned")
				}
			})
		})
	}
}

// TestBreakCarryGroupStartOverlappedByAStop: a lease of three units,
// started one by one in order; the second's start waits when a handoff
// comes. The stop of all three runs at once beside it:
//
//   - it replaces the second's start: the third is never started, the
//     release comes once all three are stopped, nothing runs after;
//   - the second's start had got through (only its answer is late): the
//     start goroutine goes on to the third after the stop and the release.
//     The guard refuses that start (the status is no longer starting):
//     nothing runs after the release. This is the same on the parent
//     commit: the start goroutine (the stepping one then) goes on through
//     the group the same way; the guard is what stops it.
//
// Held.
func TestBreakCarryGroupStartOverlappedByAStop(t *testing.T) {
	units := []string{"a.service", "b.service", "c.service"}
	for _, replace := range []bool{true, false} {
		t.Run(fmt.Sprintf("replace %t", replace), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := bcLaunch(t, policy.Config{Seed: 7}, units, func(b *bcSup) {
					b.u.startGate["b.service"] = make(chan struct{})
					b.u.replace = replace
				})
				defer b.finish(t)
				if !until(time.Minute, func() bool { return b.u.starting("b.service") == 1 }) {
					t.Fatalf("b.service's start not under way: %v", b.u.traced())
				}
				b.s.Handoff(t.Context())
				synctest.Wait()
				if !replace {
					if b.store.releaseNo.Load() != 1 {
						t.Fatalf("the stop returned, not released: %+v", b.s.Status())
					}
					b.u.openStarts()
					synctest.Wait()
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if r := b.u.runningUnits(); len(r) != 0 || b.s.Holding() || b.store.releaseNo.Load() != 1 {
					t.Fatalf("after the handoff: running %v, holding %t, %d releases; trace %v", r, b.s.Holding(), b.store.releaseNo.Load(), b.u.traced())
				}
				tr := b.u.traced()
				cAdmitted := slices.Contains(tr, "start c.service")
				cRefused := slices.Contains(tr, "refused c.service")
				if cAdmitted || cRefused == replace {
					t.Fatalf("c.service: admitted %t, refused %t (replace %t): %v", cAdmitted, cRefused, replace, tr)
				}
				if b.journaled("started") != 0 {
					t.Fatalf("a group whose start was overlapped by a stop journalled started")
				}
			})
		})
	}
}

// TestBreakCarryStopFailsWithFlagsPending: a handoff's stop of a group
// fails (one unit still active after SIGKILL) while SetEligibleSoon flags
// and nudges wait: the flag flushed before the failed stop's result
// changes nothing: stop_failed, holding, never released while the unit
// runs, renewing; the stop is tried again and, once it succeeds, the
// lease is released. A failed stop is never reported as stopped.
//
// Held.
func TestBreakCarryStopFailsWithFlagsPending(t *testing.T) {
	for _, soon := range []bool{false, true} {
		t.Run(fmt.Sprintf("eligible soon %t", soon), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				units := []string{"a.service", "b.service"}
				b := parkedStart(t, policy.Config{Seed: 7}, units, nil)
				defer b.finish(t)
				b.u.openStarts()
				synctest.Wait()
				b.u.gateStops()
				b.u.with(func() { b.u.stopFail["b.service"] = true })
				stopped := b.journaled("stopped") // the startup stop's
				b.s.Handoff(t.Context())
				synctest.Wait()
				b.s.SetEligibleSoon(soon)
				b.s.Nudge()
				b.u.openStops()
				time.Sleep(testTiming.StopWait * 3)
				synctest.Wait()
				st := b.s.Status()
				if st.Role != policy.StopFailed.String() && st.Role != policy.Stopping.String() || !st.Holding || b.store.releaseNo.Load() != 0 {
					t.Fatalf("b.service's stop fails: %+v, %d releases", st, b.store.releaseNo.Load())
				}
				if b.journaled("stopped") != stopped || b.journaled("stop_failed") == 0 {
					t.Fatalf("a failed stop: %d stopped, %d stop_failed entries", b.journaled("stopped")-stopped, b.journaled("stop_failed"))
				}
				b.u.with(func() { b.u.stopFail["b.service"] = false })
				if !until(time.Minute, func() bool { return b.store.releaseNo.Load() == 1 }) {
					t.Fatalf("b.service stops at last, never released: %+v", b.s.Status())
				}
			})
		})
	}
}

// TestBreakCarryRandomInterleavings: a supervisor of one to three units
// under a random schedule of every event a daemon can bring while its
// jobs wait at random gates: handoffs, unit failures, eligibility (both
// ways, with and without an event), withdrawals, deferrals, nudges,
// wakes, Redis cut off and back, stops and starts that fail. The fakes
// check, throughout: a start is admitted (by the guard) only while the
// record is this node's, held; never two starts or two stops of a unit
// at once, nor a start while its stop is under way; never a release while
// a unit runs, its stop is under way, or an admitted start is. At the end
// every fault is cleared and every gate opened: the supervisor ends
// leading with every unit running, or holding nothing with none running.
//
// Held (48 schedules).
func TestBreakCarryRandomInterleavings(t *testing.T) {
	groups := [][]string{{"a.service"}, {"a.service", "b.service"}, {"a.service", "b.service", "c.service"}}
	for seed := range 48 {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(seed), 0xca77))
				units := groups[seed%len(groups)]
				b := bcLaunch(t, policy.Config{Seed: uint64(seed)}, units, func(b *bcSup) {
					b.u.checkStore = true
					b.u.queueFirst = seed%2 == 0
				})
				defer b.finish(t)
				ctx := t.Context()
				for range 250 {
					unit := units[r.IntN(len(units))]
					switch r.IntN(16) {
					case 0, 1:
						b.u.gateStart(unit)
					case 2, 3:
						b.u.openStarts()
					case 4:
						b.u.gateStops()
					case 5, 6:
						b.u.openStops()
					case 7:
						b.s.Handoff(ctx)
					case 8:
						b.s.UnitFailed(ctx)
					case 9:
						b.s.SetEligible(ctx, r.IntN(3) != 0)
					case 10:
						b.s.SetEligibleSoon(r.IntN(3) != 0)
					case 11:
						b.s.SetWithdrawn(ctx, r.IntN(3) == 0)
					case 12:
						b.s.SetDelay(ctx, time.Duration(r.IntN(3))*time.Second)
					case 13:
						b.s.Nudge()
						b.s.Wake()
					case 14:
						b.store.setCut(r.IntN(3) == 0)
					case 15:
						b.u.with(func() {
							b.u.stopFail[unit] = r.IntN(4) == 0
							b.u.startFail[unit] = r.IntN(4) == 0
						})
					}
					if r.IntN(3) == 0 {
						time.Sleep(time.Duration(r.IntN(3000)) * time.Millisecond)
					} else {
						synctest.Wait()
					}
				}
				b.u.with(func() { clear(b.u.stopFail); clear(b.u.startFail) })
				b.u.openAll()
				b.store.setCut(false)
				b.s.SetEligible(ctx, true)
				b.s.SetEligibleSoon(true)
				b.s.SetWithdrawn(ctx, false)
				b.s.SetDelay(ctx, 0)
				tm, _ := testTiming.Resolved()
				time.Sleep(3*tm.CrashBound() + 3*tm.Backoff())
				synctest.Wait()
				st := b.s.Status()
				running := b.u.runningUnits()
				t.Logf("STATS %+v releases %d journal: started %d stopped %d stop_failed %d lost %d renew_failed %d unit_failed %d",
					b.u.counts(), b.store.releaseNo.Load(), b.journaled("started"), b.journaled("stopped"), b.journaled("stop_failed"), b.journaled("lost"), b.journaled("renew_failed"), b.journaled("unit_failed"))
				switch {
				case st.Role == policy.Leader.String() && st.Holding && len(running) == len(units):
				case !st.Holding && (st.Role == policy.Standby.String() || st.Role == policy.Backoff.String()) && len(running) == 0:
				default:
					t.Errorf("settled at %+v with %v running (of %v)\ntrace %v", st, running, units, b.u.traced())
				}
			})
		})
	}
}

// TestBreakCarryStartupStopParkedKeepsTheStandbyOut: the startup stop
// (rule 6) waits on its goroutine for a long time while nudges, wakes,
// a handoff, eligibility and withdrawal changes come: nothing is
// observed, acquired or started before it is confirmed, and nothing is
// busy, overdue or late for the watchdog. Afterwards the supervisor
// leads as always.
//
// Held.
func TestBreakCarryStartupStopParkedKeepsTheStandbyOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bcLaunch(t, policy.Config{Seed: 7}, []string{"a.service", "b.service"}, func(b *bcSup) {
			b.u.stopGate = make(chan struct{})
		})
		defer b.finish(t)
		ctx := t.Context()
		for i := range 60 {
			b.s.Nudge()
			b.s.Wake()
			switch i % 4 {
			case 0:
				b.s.Handoff(ctx)
			case 1:
				b.s.SetEligibleSoon(i%8 == 1)
			case 2:
				b.s.SetWithdrawn(ctx, i%8 == 2)
			case 3:
				b.s.SetEligible(ctx, true)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			if now := b.clock(); b.s.Stuck(now, 0) {
				t.Fatalf("the startup stop waits: stuck (busy %t, overdue %t, late %t)", b.s.Busy(now, 0), b.s.Overdue(now, 0), b.s.StopLate(now, 0))
			}
		}
		b.s.SetWithdrawn(ctx, false)
		b.s.SetEligibleSoon(true)
		if n := b.store.requests(); n != 0 || b.u.counts().startCalls != 0 {
			t.Fatalf("while the startup stop waits: %d store requests, %+v", n, b.u.counts())
		}
		if b.journaled("refused") != 0 {
			t.Fatalf("a handoff during the startup stop was refused:\n%s", b.logs)
		}
		b.u.openStops()
		if !until(time.Minute, func() bool { return b.s.Status().Role == policy.Leader.String() }) {
			t.Fatalf("not leading a minute after the startup stop: %+v", b.s.Status())
		}
		if c := b.u.counts(); c.admitted != 2 || c.started != 2 {
			t.Fatalf("%+v: want both units started once", c)
		}
	})
}

// TestBreakCarryManyLeasesNoJobLost: many supervisors whose startup stops
// and starts all wait at once (as when a daemon starts with many leases),
// then are let through in a random order: every job's result is stepped
// (each lease ends leading, each unit started once), none is stepped
// twice (one started entry each), and nothing overlaps.
//
// Held.
func TestBreakCarryManyLeasesNoJobLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const leases = 40
		bs := make([]*bcSup, leases)
		for i := range bs {
			bs[i] = bcLaunch(t, policy.Config{Seed: uint64(i)}, []string{"u.service"}, func(b *bcSup) {
				b.u.stopGate = make(chan struct{})
				b.u.startGate["u.service"] = make(chan struct{})
				b.u.checkStore = true
			})
		}
		defer func() {
			for _, b := range bs {
				b.finish(t)
			}
		}()
		synctest.Wait()
		r := rand.New(rand.NewPCG(1, 2))
		for _, i := range r.Perm(leases) {
			bs[i].u.openStops()
			synctest.Wait()
		}
		if !until(time.Minute, func() bool {
			for _, b := range bs {
				if b.u.starting("u.service") != 1 {
					return false
				}
			}
			return true
		}) {
			t.Fatal("not every lease's start under way after a minute")
		}
		for _, i := range r.Perm(leases) {
			bs[i].u.openStarts()
			synctest.Wait()
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for i, b := range bs {
			c := b.u.counts()
			if st := b.s.Status(); st.Role != policy.Leader.String() || c.admitted != 1 || c.started != 1 || b.journaled("started") != 1 || b.journaled("stopped") != 1 {
				t.Errorf("lease %d: %+v, %+v, %d started, %d stopped entries", i, st, c, b.journaled("started"), b.journaled("stopped"))
			}
		}
	})
}
