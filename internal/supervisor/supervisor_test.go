package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// fakeStore is an in-memory lease key with the scripts' semantics. It is
// strict: a release while the test forbids one fails the test.
type fakeStore struct {
	t  *testing.T
	mu sync.Mutex

	raw          string // "": missing
	cut          bool   // Redis unreachable: every request's outcome is unknown
	noRelease    bool
	releases     int
	tokenCounter int
}

// current decodes the key's value (policy.Absent when missing).
func (f *fakeStore) current() (policy.Record, error) {
	if f.raw == "" {
		return policy.Absent, nil
	}
	return redislease.Decode("k", f.raw)
}

// write stores r as the scripts would and returns it as read back.
func (f *fakeStore) write(r policy.Record) policy.Record {
	f.raw = redislease.Encode(r)
	rec, _ := redislease.Decode("k", f.raw)
	return rec
}

func (f *fakeStore) Observe(context.Context, string) (policy.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return policy.Record{}, redislease.ErrUnknown
	}
	return f.current()
}

func (f *fakeStore) Acquire(_ context.Context, _ string, seen policy.Record) (policy.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, _ := f.current()
	if !seen.Same(cur) {
		return policy.Record{}, &redislease.ConflictError{Key: "k", Current: cur}
	}
	f.tokenCounter++
	return f.write(policy.Record{Holder: "node-a", Version: seen.Version + 1, Token: fmt.Sprintf("%032x", f.tokenCounter)}), nil
}

func (f *fakeStore) Renew(_ context.Context, _ string, held policy.Record) (policy.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return policy.Record{}, redislease.ErrUnknown
	}
	if f.raw == "" {
		return policy.Record{}, redislease.ErrMissing
	}
	cur, _ := f.current()
	if !owns(cur, held) {
		return policy.Record{}, &redislease.LostError{Key: "k", Current: cur}
	}
	cur.Version++
	return f.write(cur), nil
}

func (f *fakeStore) Release(_ context.Context, _ string, held policy.Record) (policy.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return policy.Record{}, redislease.ErrUnknown
	}
	if f.noRelease {
		f.t.Errorf("release of %v: this test forbids it", held)
	}
	f.releases++
	cur, _ := f.current()
	if !owns(cur, held) {
		return policy.Record{}, &redislease.LostError{Key: "k", Current: cur}
	}
	cur.Version++
	cur.Released = true
	return f.write(cur), nil
}

// owns is the scripts' ownership check: the key holds held's record.
func owns(cur, held policy.Record) bool {
	return cur.Present && !cur.Released && cur.Holder == held.Holder && cur.Token == held.Token && cur.Version == held.Version
}

// steal makes another node the holder, as after a partition.
func (f *fakeStore) steal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, _ := f.current()
	cur.Holder, cur.Version, cur.Token = "node-b", cur.Version+1, strings.Repeat("b", 32)
	f.write(cur)
}

func (f *fakeStore) set(raw string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.raw = raw
}

func (f *fakeStore) holder() (string, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, _ := f.current()
	return cur.Holder, cur.Version
}

// fakeUnits counts starts and stops; running is the unit's state.
type fakeUnits struct {
	mu            sync.Mutex
	running       bool
	starts, stops int
	envs          []Env // each start's environment
}

func (u *fakeUnits) Start(_ context.Context, _ string, env Env) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.starts++
	u.running = true
	u.envs = append(u.envs, env)
	return nil
}

func (u *fakeUnits) StartOrder(_ context.Context, units []string) ([]string, error) {
	return units, nil
}

func (u *fakeUnits) Stop(context.Context, string, func()) (bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stops++
	u.running = false
	return false, nil
}

func (u *fakeUnits) state() (bool, int, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.running, u.starts, u.stops
}

var testTiming = policy.Timing{Retry: time.Second, RenewDeadline: 2 * time.Second, StopWait: 2 * time.Second,
	ReplyMax: 500 * time.Millisecond, PollMin: 500 * time.Millisecond, PollMax: time.Second, Allowance: time.Second}

// supervise runs a supervisor in a synctest bubble: time is fake, so the
// test takes microseconds and time.Sleep advances it deterministically.
func supervise(t *testing.T, store *fakeStore, units *fakeUnits, log *slog.Logger) (*Supervisor, context.CancelFunc) {
	m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	s := New("demo", []string{"demo.service"}, "node-a", m, store, units, BootClock(), log)
	ctx, cancel := context.WithCancel(t.Context())
	s.Start(ctx)
	return s, cancel
}

func TestSupervisorAcquiresStartsAndRenews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, units, logs := &fakeStore{t: t, noRelease: true}, &fakeUnits{}, &bytes.Buffer{}
		s, cancel := supervise(t, store, units, logging.Text(logs, slog.LevelDebug))
		defer cancel()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		running, starts, stops := units.state()
		if !running || starts != 1 || stops != 1 {
			t.Fatalf("unit running %t after %d starts and %d stops (want the startup stop, then one start)", running, starts, stops)
		}
		st := s.Status()
		holder, version := store.holder()
		if st.Role != "leader" || !st.Holding || holder != "node-a" || version < 10 {
			t.Fatalf("status %+v, store held by %s at version %d (want renewals every second)", st, holder, version)
		}
		for _, e := range []string{"UNITLEASE_EVENT=acquired", "UNITLEASE_EVENT=started", "UNITLEASE_LEASE=demo", "UNITLEASE_NODE=node-a"} {
			if !strings.Contains(logs.String(), e) {
				t.Errorf("log lacks %s:\n%s", e, logs)
			}
		}
	})
}

func TestSupervisorStopsAtOnceOnLossAndNeverReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, units, logs := &fakeStore{t: t, noRelease: true}, &fakeUnits{}, &bytes.Buffer{}
		s, cancel := supervise(t, store, units, logging.Text(logs, slog.LevelDebug))
		defer cancel()
		time.Sleep(20 * time.Second)
		store.steal()
		time.Sleep(1500 * time.Millisecond) // one retry period and a bit: the next renewal finds it
		synctest.Wait()
		if running, _, _ := units.state(); running {
			t.Fatal("the unit still runs after the lease was found held elsewhere")
		}
		if st := s.Status(); st.Holding {
			t.Fatalf("still holding: %+v", st)
		}
		if !strings.Contains(logs.String(), "UNITLEASE_EVENT=lost") {
			t.Fatalf("no lost event:\n%s", logs)
		}
	})
}

func TestSupervisorNeverAcquiresGarbageAndReportsItOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, units, logs := &fakeStore{t: t, noRelease: true}, &fakeUnits{}, &bytes.Buffer{}
		store.set("not a record")
		_, cancel := supervise(t, store, units, logging.Text(logs, slog.LevelDebug))
		defer cancel()
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if _, starts, _ := units.state(); starts != 0 {
			t.Fatalf("started %d times over garbage", starts)
		}
		if n := strings.Count(logs.String(), "UNITLEASE_EVENT=garbage"); n != 1 {
			t.Fatalf("garbage reported %d times, want once:\n%s", n, logs)
		}
		if h, _ := store.holder(); h != "" {
			t.Fatalf("garbage overwritten by %s", h)
		}
	})
}

func TestSupervisorHandoffStopsThenReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, units, logs := &fakeStore{t: t}, &fakeUnits{}, &bytes.Buffer{}
		s, cancel := supervise(t, store, units, logging.Text(logs, slog.LevelDebug))
		defer cancel()
		time.Sleep(20 * time.Second)
		s.Handoff(t.Context())
		time.Sleep(time.Second)
		synctest.Wait()
		running, _, _ := units.state()
		rec, _ := store.current()
		if running || store.releases != 1 || !rec.Released || s.Holding() {
			t.Fatalf("after handoff: running %t, releases %d, record %+v, holding %t", running, store.releases, rec, s.Holding())
		}
		if i, j := strings.LastIndex(logs.String(), "UNITLEASE_EVENT=stopped"), strings.LastIndex(logs.String(), "UNITLEASE_EVENT=released"); j < 0 || i > j {
			t.Fatalf("release not after the stop:\n%s", logs)
		}
	})
}

// gatedHandler blocks every log write until its gate is closed, like a
// journald that stopped reading.
type gatedHandler struct{ gate chan struct{} }

func (h gatedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h gatedHandler) Handle(context.Context, slog.Record) error {
	<-h.gate
	return nil
}
func (h gatedHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h gatedHandler) WithGroup(string) slog.Handler      { return h }

// TestSupervisorStuckOnlyWhileBusy: a loop blocked in a step for longer
// than the watchdog allows is stuck; a loop waiting for its next event is
// not, however long it waits.
func TestSupervisorStuckOnlyWhileBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		clock := BootClock()
		s := New("demo", []string{"demo.service"}, "node-a", m, &fakeStore{t: t}, &fakeUnits{}, clock, slog.New(gatedHandler{gate}))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		synctest.Wait() // the startup stop is journalled: the step blocks
		time.Sleep(10 * time.Second)
		if !s.Stuck(clock(), 5*time.Second) {
			t.Fatal("a loop blocked in a step for 10s is not stuck")
		}
		if s.Stuck(clock(), 20*time.Second) {
			t.Fatal("stuck before its limit")
		}
		close(gate)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		if s.Stuck(clock(), 5*time.Second) {
			t.Fatal("a loop waiting for its next event is stuck")
		}
	})
}

// orderedUnits starts units in the reverse of their names, as if the
// second were After= nothing and the first After= the second, and records
// the order of the starts.
type orderedUnits struct {
	fakeUnits
	started []string
}

func (u *orderedUnits) StartOrder(_ context.Context, units []string) ([]string, error) {
	order := slices.Clone(units)
	slices.Reverse(order)
	return order, nil
}

func (u *orderedUnits) Start(ctx context.Context, unit string, env Env) error {
	u.mu.Lock()
	u.started = append(u.started, unit)
	u.mu.Unlock()
	return u.fakeUnits.Start(ctx, unit, env)
}

// TestSupervisorGroup: a group's units start in the order StartOrder
// gives; every journal entry names each unit in a UNITLEASE_UNIT field of
// its own; a state change without an event of its own is logged at info.
func TestSupervisorGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		units, logs := &orderedUnits{}, &bytes.Buffer{}
		s := New("db", []string{"a.service", "b.service"}, "node-a", m, &fakeStore{t: t, noRelease: true}, units, BootClock(), logging.Text(logs, slog.LevelInfo))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		units.mu.Lock()
		started := slices.Clone(units.started)
		units.mu.Unlock()
		if !slices.Equal(started, []string{"b.service", "a.service"}) {
			t.Fatalf("started %v, want b.service then a.service", started)
		}
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if strings.Contains(line, "UNITLEASE_EVENT=") && (!strings.Contains(line, "UNITLEASE_UNIT=a.service") || !strings.Contains(line, "UNITLEASE_UNIT=b.service")) {
				t.Errorf("an entry without a UNITLEASE_UNIT for each unit: %s", line)
			}
		}
		if !strings.Contains(logs.String(), "UNITLEASE_EVENT=state") {
			t.Errorf("no state change without an event of its own logged at info:\n%s", logs)
		}
	})
}

// TestSupervisorEventsBeforeStartAreDropped: a nudge, a unit failure or a
// handoff that reaches a supervisor the daemon has listed but not yet
// started (a reload races the wake-ups) is dropped; the first step then
// runs as always.
func TestSupervisorEventsBeforeStartAreDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		units := &fakeUnits{}
		s := New("demo", []string{"demo.service"}, "node-a", m, &fakeStore{t: t, noRelease: true}, units, BootClock(), logging.Text(&bytes.Buffer{}, slog.LevelInfo))
		s.Nudge()
		s.UnitFailed(t.Context())
		s.Handoff(t.Context())
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if running, starts, stops := units.state(); !running || starts != 1 || stops != 1 {
			t.Fatalf("unit running %t after %d starts and %d stops (want the startup stop, then one start)", running, starts, stops)
		}
	})
}

// enteredHandler is gatedHandler that says when the first write began.
type enteredHandler struct {
	gatedHandler
	entered chan struct{}
	once    *sync.Once
}

func (h enteredHandler) Handle(ctx context.Context, r slog.Record) error {
	h.once.Do(func() { close(h.entered) })
	return h.gatedHandler.Handle(ctx, r)
}
func (h enteredHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

// TestSupervisorNudgesWhileAStepHangsAreOne: nudges that come while a
// step hangs (journald stopped reading) wait as one goroutine, not one
// each. Real time: synctest does not count a goroutine waiting for a
// mutex as blocked.
func TestSupervisorNudgesWhileAStepHangsAreOne(t *testing.T) {
	m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	h := enteredHandler{gatedHandler{make(chan struct{})}, make(chan struct{}), &sync.Once{}}
	s := New("demo", []string{"demo.service"}, "node-a", m, &fakeStore{t: t}, &fakeUnits{}, BootClock(), slog.New(h))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s.Start(ctx)
	<-h.entered // the startup stop's entry: the first step hangs in it
	before := runtime.NumGoroutine()
	for range 100 {
		s.Nudge()
		runtime.Gosched() // let a nudge's goroutine run up to the mutex
	}
	if grew := runtime.NumGoroutine() - before; grew > 1 {
		t.Errorf("100 nudges while a step hangs left %d goroutines waiting, want 1", grew)
	}
	close(h.gate)
}

// switchedHandler passes entries to the text log until blocked, then
// holds every write until released, like a journald that stopped reading.
type switchedHandler struct {
	slog.Handler
	mu      *sync.Mutex
	blocked *chan struct{} // non-nil while writes block
}

func newSwitchedHandler(w *bytes.Buffer) switchedHandler {
	return switchedHandler{Handler: slog.NewTextHandler(w, nil), mu: &sync.Mutex{}, blocked: new(chan struct{})}
}

func (h switchedHandler) block() {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.blocked = make(chan struct{})
}

func (h switchedHandler) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(*h.blocked)
	*h.blocked = nil
}

func (h switchedHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	gate := *h.blocked
	h.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return h.Handler.Handle(ctx, r)
}

func (h switchedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

// TestSupervisorStopsInTimeWhileTheJournalIsBlocked: a leader cut off
// from Redis stops its unit at its deadline even though journald stopped
// reading: no step waits on a journal write.
func TestSupervisorStopsInTimeWhileTheJournalIsBlocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, units, logs := &fakeStore{t: t, noRelease: true}, &fakeUnits{}, &bytes.Buffer{}
		h := newSwitchedHandler(logs)
		journal := logging.NewAsync(h, 1) // as the daemon's, with room for one entry
		s, cancel := supervise(t, store, units, slog.New(journal))
		defer cancel()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if running, _, _ := units.state(); !running || !s.Holding() {
			t.Fatal("not leading after 20s")
		}
		h.block()
		store.mu.Lock()
		store.cut = true
		store.mu.Unlock()
		// The deadline is retry + renew_deadline (3s) after the last
		// renewal sent, which was within the last retry.
		time.Sleep(testTiming.Retry + testTiming.RenewDeadline + time.Millisecond)
		synctest.Wait()
		running, _, _ := units.state()
		dropped := journal.Dropped()
		h.release()
		cancel()
		if !journal.Close(time.Second) {
			t.Fatal("the journal queue was not written once the journal read again")
		}
		if running {
			t.Fatalf("the unit still runs past the deadline while the journal is blocked:\n%s", logs)
		}
		if dropped == 0 || !strings.Contains(logs.String(), fmt.Sprintf("UNITLEASE_EVENT=journal_dropped UNITLEASE_DROPPED=%d", dropped)) {
			t.Fatalf("%d entries dropped while the journal was blocked, and not reported as such:\n%s", dropped, logs)
		}
	})
}

// fakeOffset is CLOCK_BOOTTIME's lead over CLOCK_MONOTONIC as a test
// sets it: suspend adds to it, as a suspend does; fail makes reads fail.
type fakeOffset struct {
	mu   sync.Mutex
	o    Offset
	fail bool
}

func (f *fakeOffset) read() (Offset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return Offset{}, fmt.Errorf("clock_gettime: invalid argument")
	}
	return f.o, nil
}

func (f *fakeOffset) set(o Offset, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.o, f.fail = o, fail
}

// suspend is a suspend of d: CLOCK_BOOTTIME ran on, CLOCK_MONOTONIC
// (and with it the runtime's timers, and synctest's fake time) did not.
func (f *fakeOffset) suspend(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.o.Lo += d
	f.o.Hi += d
}

// TestSuspendClockCountsASuspend: the clock is the runtime's monotonic
// reading plus the suspends since it began; a wider bracket or a failed
// read never takes it back. (Before, BootClock read time.Since
// alone: a suspend of an hour counted nothing.)
func TestSuspendClockCountsASuspend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		off := &fakeOffset{o: Offset{Lo: 5 * time.Second, Hi: 5 * time.Second}}
		clock := SuspendClock(off.read)
		time.Sleep(2 * time.Second)
		if got := clock(); got != policy.Instant(2*time.Second) {
			t.Fatalf("after 2s awake the clock reads %v", got)
		}
		off.suspend(time.Hour)
		if got := clock(); got != policy.Instant(time.Hour+2*time.Second) {
			t.Fatalf("after 2s awake and an hour suspended the clock reads %v, want +1h0m2s", got)
		}
		// A bracket widened by a preempted read: its lower end is below
		// what was read before. The clock stays where it was.
		off.set(Offset{Lo: 5*time.Second + time.Hour - time.Millisecond, Hi: 5*time.Second + time.Hour + time.Millisecond}, false)
		if got := clock(); got != policy.Instant(time.Hour+2*time.Second) {
			t.Fatalf("a wide bracket moved the clock to %v", got)
		}
		off.set(Offset{}, true)
		time.Sleep(time.Second)
		if got := clock(); got != policy.Instant(time.Hour+3*time.Second) {
			t.Fatalf("with the offset unreadable the clock reads %v, want the runtime's second on top of what it had", got)
		}
	})
}

// TestReadOffsetBracketsTheKernelClocks reads the real clocks:
// CLOCK_BOOTTIME is never behind CLOCK_MONOTONIC, the bracket is ordered,
// and BootClock is never ahead of CLOCK_BOOTTIME read around it. No
// suspend happens here, so this checks the reads, not the counting (which
// TestSuspendClockCountsASuspend does).
func TestReadOffsetBracketsTheKernelClocks(t *testing.T) {
	boot := func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	o, err := ReadOffset()
	if err != nil {
		t.Fatal(err)
	}
	if o.Hi < 0 || o.Lo > o.Hi {
		t.Fatalf("offset %+v: want 0 <= Hi and Lo <= Hi", o)
	}
	b0 := boot()
	clock := BootClock()
	runtime.Gosched()
	got := clock()
	if b1 := boot(); got < 0 || got.Sub(0) > b1-b0 {
		t.Fatalf("the clock read %v while CLOCK_BOOTTIME moved %v", got, b1-b0)
	}
}

// TestSupervisorWakeAfterASuspendStopsAtOnce: a leader whose machine
// slept for an hour (its peer took the lease meanwhile) stops its unit on
// Wake, before any of its runtime timers fires: the step sees its
// deadline an hour past. Without Wake the unit would run on until its
// renewal timer fired and the renewal came back lost.
func TestSupervisorWakeAfterASuspendStopsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, units, logs := suspendedLeader(t)
		s.Wake()
		synctest.Wait() // no fake time passes: no runtime timer set before can fire
		if running, _, _ := units.state(); running {
			t.Fatalf("the unit still runs on resume, an hour past its deadline:\n%s", logs)
		}
		i, j := strings.Index(logs.String(), "UNITLEASE_EVENT=renew_failed"), strings.Index(logs.String(), "UNITLEASE_EVENT=lost")
		if i < 0 || (j >= 0 && j < i) {
			t.Fatalf("the stop was not the deadline's (renew_failed before any lost):\n%s", logs)
		}
	})
}

// suspendedLeader is, in a synctest bubble, a supervisor on a clock that
// counts suspends, leading after 20 s; then its peer, whose clock ran,
// takes the lease, and the machine sleeps an hour, the resume not yet
// noticed (no Wake). It ends with the test.
func suspendedLeader(t *testing.T) (*Supervisor, *fakeUnits, *bytes.Buffer) {
	t.Helper()
	m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	store, units, logs, off := &fakeStore{t: t}, &fakeUnits{}, &bytes.Buffer{}, &fakeOffset{}
	s := New("demo", []string{"demo.service"}, "node-a", m, store, units, SuspendClock(off.read), logging.Text(logs, slog.LevelDebug))
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	s.Start(ctx)
	time.Sleep(20 * time.Second)
	synctest.Wait()
	if running, _, _ := units.state(); !running || !s.Holding() {
		t.Fatal("not leading after 20s")
	}
	store.steal()
	off.suspend(time.Hour)
	return s, units, logs
}

// timedStore records when each successful renewal was sent (the fake
// store answers at once, so when it was answered).
type timedStore struct {
	*fakeStore
	renewed time.Time
}

func (s *timedStore) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	rec, err := s.fakeStore.Renew(ctx, name, held)
	if err == nil {
		s.mu.Lock()
		s.renewed = time.Now()
		s.mu.Unlock()
	}
	return rec, err
}

func (s *timedStore) lastRenewal() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewed
}

// TestSupervisorWakeKeepsTheTimerOnTheClock: after a suspend shorter
// than the time left to the next renewal, Wake re-arms the timer so the
// renewal goes out when the clock (which counted the suspend) reaches it,
// not as much later as the suspend was long; and a Wake with nothing due
// steps nothing.
func TestSupervisorWakeKeepsTheTimerOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		store, off := &timedStore{fakeStore: &fakeStore{t: t, noRelease: true}}, &fakeOffset{}
		s := New("demo", []string{"demo.service"}, "node-a", m, store, &fakeUnits{}, SuspendClock(off.read), logging.Text(&bytes.Buffer{}, slog.LevelInfo))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		last := store.lastRenewal()
		left := time.Until(last.Add(testTiming.Retry)) // no renew grid: due retry after the last
		if !s.Holding() || left <= 0 {
			t.Fatalf("holding %t, next renewal in %v: the test needs a leader with one ahead", s.Holding(), left)
		}
		s.Wake()
		synctest.Wait()
		if got := store.lastRenewal(); !got.Equal(last) {
			t.Fatalf("a Wake with nothing due renewed %v early", last.Add(testTiming.Retry).Sub(got))
		}
		slept := left / 2
		off.suspend(slept)
		s.Wake()
		time.Sleep(left - slept)
		synctest.Wait()
		if got := store.lastRenewal(); !got.Equal(time.Now()) {
			t.Fatalf("the renewal due now on the clock (after a %v suspend) was not sent; the last was %v ago", slept, time.Since(got))
		}
	})
}

// hookFuncs is Hooks of functions, each optional.
type hookFuncs struct {
	unitFailed func()
	acquired   func(seen, got policy.Record)
	released   func(policy.Record, policy.Cause)
}

func (h hookFuncs) UnitFailed() {
	if h.unitFailed != nil {
		h.unitFailed()
	}
}

func (h hookFuncs) Acquired(seen, got policy.Record) {
	if h.acquired != nil {
		h.acquired(seen, got)
	}
}

func (h hookFuncs) Released(rec policy.Record, c policy.Cause) {
	if h.released != nil {
		h.released(rec, c)
	}
}
