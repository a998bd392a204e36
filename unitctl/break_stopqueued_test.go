package unitctl

// Review tests of StopQueued (b106f64): the places of checkCalls on every
// path (a ctx that ends while the stop checks, a state read that fails,
// a Systemd closed while stops wait, a mix of all under -race), and that
// neither a stop due by a deadline (Stop) nor a start waits behind the
// line of queued stops. Each holds on b106f64.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// bsqFake re-exports the fake's Manager table (ExportMethodTable
// replaces an interface's methods): the same methods, except that
// GetUnitProcesses of a unit in gated waits until gate is closed, and
// ListUnitsByNames fails (with an error that is an answer, not a
// transient one) for any batch that names a unit in unreadable.
type bsqFake struct {
	f          *fakeSystemd
	gate       chan struct{}
	openGate   func()
	mu         sync.Mutex
	gated      map[string]bool
	unreadable map[string]bool
	procsIn    atomic.Int64 // GetUnitProcesses calls of gated units in the handler
	procCalls  atomic.Int64
}

func bsqExport(t *testing.T, f *fakeSystemd) *bsqFake {
	t.Helper()
	x := &bsqFake{f: f, gate: make(chan struct{}), gated: map[string]bool{}, unreadable: map[string]bool{}}
	x.openGate = sync.OnceFunc(func() { close(x.gate) })
	t.Cleanup(x.openGate)
	manager := f.manager()
	manager["ListUnitsByNames"] = func(names []string) ([]fakeUnit, *dbus.Error) {
		x.mu.Lock()
		for _, n := range names {
			if x.unreadable[n] {
				x.mu.Unlock()
				return nil, dbus.NewError("org.freedesktop.DBus.Error.AccessDenied", []any{"no read of " + n})
			}
		}
		x.mu.Unlock()
		return f.list(names), nil
	}
	manager["GetUnitProcesses"] = func(name string) ([]fakeProcess, *dbus.Error) {
		x.procCalls.Add(1)
		x.mu.Lock()
		gated := x.gated[name]
		x.mu.Unlock()
		if gated {
			x.procsIn.Add(1)
			defer x.procsIn.Add(-1)
			<-x.gate
		}
		return []fakeProcess{}, nil
	}
	f.export(t, manager)
	return x
}

// hold makes units inactive, their GetUnitProcesses held at the gate.
func (x *bsqFake) hold(units ...string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, u := range units {
		x.gated[u] = true
		x.f.set(u, "inactive", 0, "")
	}
}

// inLine is the number of turns in the line of queued stops that have
// not run nor left.
func bsqInLine(s *Systemd) int {
	s.checks.mu.Lock()
	defer s.checks.mu.Unlock()
	n := 0
	for _, t := range s.checks.q {
		if !t.done {
			n++
		}
	}
	return n
}

// bsqFill queues maxStopChecks stops of inactive units whose
// GetUnitProcesses the gate holds, each on a ctx of its own, and waits
// until they hold every place; it returns their cancels and results.
func bsqFill(t *testing.T, s *Systemd, x *bsqFake, prefix string) ([]context.CancelFunc, []chan error) {
	t.Helper()
	cancels := make([]context.CancelFunc, maxStopChecks)
	results := make([]chan error, maxStopChecks)
	for i := range maxStopChecks {
		u := fmt.Sprintf("%s%d.service", prefix, i)
		x.hold(u)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		cancels[i], results[i] = cancel, make(chan error, 1)
		s.StopQueued(ctx, u, 20*time.Second, func(err error) { results[i] <- err })
	}
	if !until(10*time.Second, func() bool { return x.procsIn.Load() == maxProcCalls && len(s.checkCalls) == maxStopChecks }) {
		t.Fatalf("%d GetUnitProcesses held, %d places taken; want %d and %d", x.procsIn.Load(), len(s.checkCalls), maxProcCalls, maxStopChecks)
	}
	return cancels, results
}

// bsqWait waits for one result; the timeout is a hang detector only.
func bsqWait(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never reported", what)
		return nil
	}
}

// Probe (holds): a queued stop whose ctx ends while it checks (its
// GetUnitProcesses unanswered) gives its place back at once: the stop
// waiting behind it gets its turn and reaches systemd while systemd
// still holds every listing. The one whose ctx ended reports a *JobError
// wrapping context.Canceled and makes no StopUnit call.
func TestBreakStopQueuedCtxEndsWhileChecking(t *testing.T) {
	f := newFakeSystemd(t)
	x := bsqExport(t, f)
	s := dialFake(t, nil)
	cancels, results := bsqFill(t, s, x, "h")
	f.set("run.service", "active", 0, "")
	ran := make(chan error, 1)
	s.StopQueued(ctxFor(t, time.Minute), "run.service", 20*time.Second, func(err error) { ran <- err })
	if n := bsqInLine(s); n != 1 {
		t.Fatalf("%d stops in the line, want run.service's", n)
	}
	if c := f.stopCalls.Load(); c != 0 {
		t.Fatalf("%d StopUnit calls before any place was free", c)
	}
	cancels[0]()
	err := bsqWait(t, "h0's stop, its ctx ended while it checked", results[0])
	var je *JobError
	if !errors.As(err, &je) || !errors.Is(err, context.Canceled) || je.Unit != "h0.service" {
		t.Fatalf("h0's stop whose ctx ended while it checked: %v; want a *JobError of h0.service wrapping context.Canceled", err)
	}
	if !until(10*time.Second, func() bool { return f.stopCalls.Load() == 1 }) {
		t.Fatalf("run.service's stop never reached systemd (%d StopUnit calls, %d in the line, %d places taken) after h0 gave its place back",
			f.stopCalls.Load(), bsqInLine(s), len(s.checkCalls))
	}
	x.openGate()
	if err := bsqWait(t, "run.service's stop", ran); err != nil {
		t.Fatalf("run.service: %v", err)
	}
	for i := 1; i < maxStopChecks; i++ {
		if err := bsqWait(t, fmt.Sprintf("h%d's stop", i), results[i]); err != nil {
			t.Fatalf("h%d: %v", i, err)
		}
	}
	if c := f.stopCalls.Load(); c != 1 {
		t.Errorf("%d StopUnit calls, want run.service's only", c)
	}
	if !until(5*time.Second, func() bool { return len(s.checkCalls) == 0 }) || !poolsEmpty(s, 5*time.Second) {
		t.Errorf("places still held: %d checks, %d stop calls, %d proc calls", len(s.checkCalls), len(s.stopCalls), len(s.procCalls))
	}
}

// Probe (holds): queued stops whose state read fails (ListUnitsByNames
// answers with an error) are not found stopped: each gives its place
// back and goes on as Stop does (a StopUnit call). With every one of
// those StopUnit calls held by systemd, a queued stop of a unit stopped
// already, behind them, still gets a place and is confirmed. Once
// systemd answers, each reports.
func TestBreakStopQueuedStateReadFailsGivesPlaceBack(t *testing.T) {
	f := newFakeSystemd(t)
	x := bsqExport(t, f)
	s := dialFake(t, nil)
	release := holdStops(t, f)
	const n = maxStopChecks + 8
	x.mu.Lock()
	for i := range n {
		x.unreadable[fmt.Sprintf("bad%d.service", i)] = true
	}
	x.mu.Unlock()
	errs := make(chan error, n)
	for i := range n {
		s.StopQueued(ctxFor(t, time.Minute), fmt.Sprintf("bad%d.service", i), 20*time.Second, func(err error) { errs <- err })
	}
	if !until(10*time.Second, func() bool { return f.stopsIn.Load() == maxStopCalls }) {
		t.Fatalf("%d StopUnit calls held, want the pool's %d", f.stopsIn.Load(), maxStopCalls)
	}
	f.set("idle.service", "inactive", 0, "")
	idle := make(chan error, 1)
	s.StopQueued(ctxFor(t, time.Minute), "idle.service", 20*time.Second, func(err error) { idle <- err })
	select {
	case err := <-idle:
		if err != nil {
			t.Fatalf("idle.service: %v", err)
		}
	case err := <-errs:
		t.Fatalf("a stop whose StopUnit is held ended first: %v", err)
	case <-time.After(30 * time.Second): // a hang detector only
		t.Fatalf("idle.service's stop never reported: %d places taken, %d in the line", len(s.checkCalls), bsqInLine(s))
	}
	release()
	for i := range n {
		// Their reads keep failing: whatever each reports, it reports.
		bsqWait(t, fmt.Sprintf("stop %d of a unit whose state cannot be read", i), errs)
	}
	if !until(5*time.Second, func() bool { return len(s.checkCalls) == 0 }) {
		t.Errorf("%d check places still held", len(s.checkCalls))
	}
}

// Probe (holds): a Systemd closed while queued stops hold every place
// (their GetUnitProcesses unanswered) and more wait in the line on ctxs
// that never end: every one reports, with an error (nothing was
// confirmed), none makes a StopUnit call, and every place is given back.
func TestBreakStopQueuedCloseWhileStopsWait(t *testing.T) {
	f := newFakeSystemd(t)
	x := bsqExport(t, f)
	s := dialFake(t, nil)
	const more = 30
	errs := make(chan error, maxStopChecks+more)
	for i := range maxStopChecks + more {
		u := fmt.Sprintf("c%d.service", i)
		x.hold(u)
		s.StopQueued(context.Background(), u, 20*time.Second, func(err error) { errs <- err })
	}
	if !until(10*time.Second, func() bool { return x.procsIn.Load() == maxProcCalls && len(s.checkCalls) == maxStopChecks }) {
		t.Fatalf("%d GetUnitProcesses held, %d places taken", x.procsIn.Load(), len(s.checkCalls))
	}
	if n := bsqInLine(s); n != more {
		t.Fatalf("%d stops in the line, want %d", n, more)
	}
	s.Close()
	for i := range maxStopChecks + more {
		if err := bsqWait(t, fmt.Sprintf("stop %d after Close", i), errs); err == nil {
			t.Errorf("a queued stop reported its unit stopped on a closed Systemd")
		}
	}
	if c := f.stopCalls.Load(); c != 0 {
		t.Errorf("%d StopUnit calls", c)
	}
	if !until(5*time.Second, func() bool { return len(s.checkCalls) == 0 && len(s.procCalls) == 0 && len(s.stopCalls) == 0 }) {
		t.Errorf("places held after Close: %d checks, %d proc calls, %d stop calls", len(s.checkCalls), len(s.procCalls), len(s.stopCalls))
	}
	if n := bsqInLine(s); n != 0 {
		t.Errorf("%d stops left in the line", n)
	}
}

// Probe (holds): a stop due by a deadline (Stop, as the supervisor
// issues for a lost lease) does not wait behind the queued stops: with
// every place held by checks systemd does not answer and a hundred more
// in the line, its StopUnit call is made (OnQueued: systemd has the
// stop) at once. A start does not wait behind them either.
func TestBreakStopQueuedDeadlineStopAndStartNotBehindTheLine(t *testing.T) {
	f := newFakeSystemd(t)
	x := bsqExport(t, f)
	s := dialFake(t, nil)
	_, results := bsqFill(t, s, x, "w")
	const more = 100
	errs := make(chan error, more)
	for i := range more {
		u := fmt.Sprintf("m%d.service", i)
		x.hold(u)
		s.StopQueued(ctxFor(t, time.Minute), u, 20*time.Second, func(err error) { errs <- err })
	}
	if n := bsqInLine(s); n != more {
		t.Fatalf("%d stops in the line, want %d", n, more)
	}
	f.set("lost.service", "active", 0, "")
	taken := make(chan struct{})
	stopped := make(chan error, 1)
	go func() {
		ctx := OnQueued(ctxFor(t, time.Minute), sync.OnceFunc(func() { close(taken) }))
		stopped <- s.Stop(ctx, "lost.service", 20*time.Second)
	}()
	select {
	case <-taken:
	case <-time.After(30 * time.Second): // a hang detector only
		t.Fatalf("the deadline stop never reached systemd while %d queued stops waited (%d StopUnit calls)", bsqInLine(s), f.stopCalls.Load())
	}
	started := make(chan error, 1)
	go func() { started <- s.Start(ctxFor(t, time.Minute), "web.service") }()
	if err := bsqWait(t, "a start while queued stops wait", started); err != nil {
		t.Fatalf("start: %v", err)
	}
	if n := bsqInLine(s); n != more {
		t.Fatalf("%d stops in the line once the deadline stop and the start went through, want still %d", n, more)
	}
	x.openGate()
	if err := bsqWait(t, "the deadline stop", stopped); err != nil {
		t.Fatalf("lost.service: %v", err)
	}
	for i := range maxStopChecks {
		if err := bsqWait(t, "a queued stop", results[i]); err != nil {
			t.Fatal(err)
		}
	}
	for range more {
		if err := bsqWait(t, "a queued stop", errs); err != nil {
			t.Fatal(err)
		}
	}
	if !until(5*time.Second, func() bool { return len(s.checkCalls) == 0 }) || !poolsEmpty(s, 5*time.Second) {
		t.Errorf("places still held: %d checks", len(s.checkCalls))
	}
}

// Probe (holds, run under -race): 400 queued stops, a third of them of
// running units, a quarter on ctxs cancelled at once (racing the
// enqueue, the turn and the check): each reports exactly once; each
// whose ctx lasted reports its unit stopped, and the running ones are
// inactive; every place comes back.
func TestBreakStopQueuedEachReportsOnceUnderRaces(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	const n = 400
	var reports [n]atomic.Int32
	var errsOf [n]atomic.Value
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		u := fmt.Sprintf("x%d.service", i)
		if i%3 == 0 {
			f.set(u, "active", 0, "")
		} else {
			f.set(u, "inactive", 0, "")
		}
	}
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s.StopQueued(ctx, fmt.Sprintf("x%d.service", i), 20*time.Second, func(err error) {
			if err != nil {
				errsOf[i].Store(err)
			}
			if reports[i].Add(1) == 1 {
				wg.Done()
			}
		})
		if i%4 == 1 {
			go cancel()
		}
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(60 * time.Second): // a hang detector only
		left := 0
		for i := range n {
			if reports[i].Load() == 0 {
				left++
			}
		}
		t.Fatalf("%d of %d queued stops never reported (%d places taken, %d in the line)", left, n, len(s.checkCalls), bsqInLine(s))
	}
	if !until(5*time.Second, func() bool { return len(s.checkCalls) == 0 }) || !poolsEmpty(s, 5*time.Second) {
		t.Errorf("places still held: %d checks, %d stop, %d proc calls", len(s.checkCalls), len(s.stopCalls), len(s.procCalls))
	}
	for i := range n {
		if c := reports[i].Load(); c != 1 {
			t.Errorf("stop %d reported %d times", i, c)
		}
		err, _ := errsOf[i].Load().(error)
		if i%4 != 1 && err != nil {
			t.Errorf("stop %d, its ctx lasting: %v", i, err)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stop %d failed other than by its ctx: %v", i, err)
		}
		if i%3 == 0 && i%4 != 1 {
			if st, err := s.State(ctxFor(t, 10*time.Second), fmt.Sprintf("x%d.service", i)); err != nil || !st.Stopped() {
				t.Errorf("x%d.service reported stopped and is %v (%v)", i, st, err)
			}
		}
	}
}

// Probe (holds): the link to systemd breaks while queued stops hold
// every place, their GetUnitProcesses calls unanswered, and more wait in
// the line. The calls are made again on a new link; once systemd
// answers, every stop is confirmed with no StopUnit call (each unit is
// stopped already), the reconnection is logged, and every place comes
// back.
func TestBreakStopQueuedLinkLostWhileChecking(t *testing.T) {
	f := newFakeSystemd(t)
	x := bsqExport(t, f)
	lg := &logs{}
	s := dialFake(t, lg)
	_, results := bsqFill(t, s, x, "k")
	const more = 20
	errs := make(chan error, more)
	for i := range more {
		u := fmt.Sprintf("n%d.service", i)
		x.hold(u)
		s.StopQueued(ctxFor(t, time.Minute), u, 20*time.Second, func(err error) { errs <- err })
	}
	before := x.procCalls.Load()
	s.mu.Lock()
	l := s.link
	s.mu.Unlock()
	l.close()
	if !until(10*time.Second, func() bool { return x.procCalls.Load() >= before+maxProcCalls }) {
		t.Fatalf("%d GetUnitProcesses calls after the link broke, want the %d held made again", x.procCalls.Load()-before, maxProcCalls)
	}
	if len(lg.with("reconnected")) == 0 {
		t.Fatal("no reconnection logged")
	}
	x.openGate()
	for i := range maxStopChecks {
		if err := bsqWait(t, fmt.Sprintf("k%d's stop", i), results[i]); err != nil {
			t.Fatalf("k%d: %v", i, err)
		}
	}
	for range more {
		if err := bsqWait(t, "a stop that waited in the line", errs); err != nil {
			t.Fatal(err)
		}
	}
	if c := f.stopCalls.Load(); c != 0 {
		t.Errorf("%d StopUnit calls for units stopped already", c)
	}
	if !until(5*time.Second, func() bool { return len(s.checkCalls) == 0 }) || !poolsEmpty(s, 5*time.Second) {
		t.Errorf("places still held: %d checks, %d proc calls", len(s.checkCalls), len(s.procCalls))
	}
}

// Probe (holds): a queued stop of a unit with a start job queued in
// systemd (a start of the daemon before, still waiting on its ordering:
// inactive, or already activating) is not taken for stopped already: it
// gives its place back and queues a stop job, which replaces the start,
// and is confirmed once the unit is inactive with no job.
func TestBreakStopQueuedUnitWithAStartJobIsStopped(t *testing.T) {
	f := newFakeSystemd(t)
	s := dialFake(t, nil)
	units := map[string]string{"waiting.service": "inactive", "activating.service": "activating"}
	for u, active := range units {
		f.set(u, active, f.job(), "start")
	}
	errs := make(chan error, len(units))
	for u := range units {
		s.StopQueued(ctxFor(t, time.Minute), u, 20*time.Second, func(err error) { errs <- err })
	}
	for range units {
		if err := bsqWait(t, "a queued stop of a unit with a start job", errs); err != nil {
			t.Fatal(err)
		}
	}
	if c := f.stopCalls.Load(); c != int64(len(units)) {
		t.Fatalf("%d StopUnit calls, want one for each unit with a start job queued", c)
	}
	for u := range units {
		if st, err := s.State(ctxFor(t, 10*time.Second), u); err != nil || !st.Stopped() || st.JobID != 0 {
			t.Errorf("%s reported stopped and is %v (%v)", u, st, err)
		}
	}
	if !until(5*time.Second, func() bool { return len(s.checkCalls) == 0 }) || !poolsEmpty(s, 5*time.Second) {
		t.Errorf("places still held: %d checks", len(s.checkCalls))
	}
}
