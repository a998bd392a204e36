package daemon

// Review tests of the daemon's queued stops (b106f64, unitsOf.StopQueued):
// the result and stop_wait it passes on, and what a removal, a
// re-annotation and a shutdown do while a lease's startup stop waits in
// the line. Each holds on b106f64.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/unitctl"
)

// bsqQueuedStops is fakeSystemd whose StopQueued (what the daemon finds on
// *unitctl.Systemd) keeps each stop waiting until the test gives it its
// turn; its turn runs the fake's Stop. It logs what happens in order.
type bsqQueuedStops struct {
	*fakeSystemd
	mu     sync.Mutex
	line   []bsqQueuedStop
	events []string // "queued <unit>", "stopped <unit>"
}

type bsqQueuedStop struct {
	ctx      context.Context
	unit     string
	stopWait time.Duration
	done     func(error)
}

func (q *bsqQueuedStops) StopQueued(ctx context.Context, unit string, stopWait time.Duration, done func(error)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.line = append(q.line, bsqQueuedStop{ctx, unit, stopWait, done})
	q.events = append(q.events, "queued "+unit)
}

// turn lets the first stop waiting through, on a goroutine of its own.
func (q *bsqQueuedStops) turn(t *testing.T) bsqQueuedStop {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.line) == 0 {
		t.Fatal("no stop waits in the line")
	}
	s := q.line[0]
	q.line = q.line[1:]
	go func() {
		err := q.fakeSystemd.Stop(s.ctx, s.unit, s.stopWait)
		q.mu.Lock()
		q.events = append(q.events, "stopped "+s.unit)
		q.mu.Unlock()
		s.done(err)
	}()
	return s
}

func (q *bsqQueuedStops) state() (waiting int, events []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.line), slices.Clone(q.events)
}

func bsqDaemon(t *testing.T, annotated map[string]string) (*bsqQueuedStops, *memStore, *Daemon, *syncBuffer) {
	t.Helper()
	tm, err := testTiming.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	q := &bsqQueuedStops{fakeSystemd: newFakeSystemd(annotated)}
	store := newMemStore()
	logs := &syncBuffer{}
	d := New(&config.Config{Node: "node-a", Timing: tm}, logging.Text(logs, slog.LevelInfo), store, q, unitctl.Config{}, func(string) {})
	return q, store, d, logs
}

// bsqSleep lets fake time pass, a second at a time.
func bsqSleep(seconds int) {
	for range seconds {
		time.Sleep(time.Second)
		synctest.Wait()
	}
}

// Probe (holds): unitsOf.StopQueued passes the configured stop_wait on,
// and reads SIGKILL off unitctl's *JobError, as Stop does; over a
// Manager that does not queue stops, done gets what Stop returned, on a
// goroutine of its own.
func TestBreakStopQueuedUnitsOfResults(t *testing.T) {
	q := &bsqQueuedStops{fakeSystemd: newFakeSystemd(nil)}
	u := &unitsOf{sd: q, stopWait: 7 * time.Second}
	type result struct {
		killed bool
		err    error
	}
	got := make(chan result, 2)
	done := func(k bool, err error) { got <- result{k, err} }
	u.StopQueued(t.Context(), "x.service", done)
	u.StopQueued(t.Context(), "y.service", done)
	q.mu.Lock()
	line := slices.Clone(q.line)
	q.mu.Unlock()
	if len(line) != 2 || line[0].stopWait != 7*time.Second || line[0].unit != "x.service" {
		t.Fatalf("queued: %+v; want x.service and y.service with stop_wait 7s", line)
	}
	failed := &unitctl.JobError{Unit: "x.service", Op: "stop", Killed: true, Err: unitctl.ErrStopFailed}
	line[0].done(failed)
	if r := <-got; !r.killed || !errors.Is(r.err, unitctl.ErrStopFailed) {
		t.Fatalf("a failed stop that sent SIGKILL: killed %t, %v", r.killed, r.err)
	}
	line[1].done(nil)
	if r := <-got; r.killed || r.err != nil {
		t.Fatalf("a stop confirmed: killed %t, %v", r.killed, r.err)
	}

	plain := newFakeSystemd(nil)
	plain.set(func(f *fakeSystemd) { f.active["z.service"], f.stuck["z.service"] = true, true })
	u = &unitsOf{sd: plain, stopWait: 7 * time.Second}
	u.StopQueued(t.Context(), "z.service", done)
	if r := <-got; !errors.Is(r.err, unitctl.ErrStopFailed) {
		t.Fatalf("over a Manager that does not queue: %v, want Stop's error", r.err)
	}
}

// Probe (holds): a lease whose startup stop waits in the line is
// re-annotated under another lease. The removal waits for the stop
// (the old supervisor is not settled while it stops), the new lease is
// not added meanwhile, so its own startup stop is queued only after the
// first one's result, and the unit is started only after both: no stop
// of the old lease is left behind in the line to stop the unit the new
// lease runs.
func TestBreakStopQueuedDaemonReannotatedWhileItsStartupStopWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, store, d, logs := bsqDaemon(t, map[string]string{"web.service": "a"})
		q.set(func(f *fakeSystemd) { f.active["web.service"] = true }) // left running
		ctx, cancel := context.WithCancel(t.Context())
		defer func() { cancel(); d.Shutdown(context.WithoutCancel(ctx)) }()
		d.Reload(ctx)
		bsqSleep(5)
		if waiting, events := q.state(); waiting != 1 || !slices.Equal(events, []string{"queued web.service"}) {
			t.Fatalf("lease a's startup stop: %d waiting, %v", waiting, events)
		}
		q.set(func(f *fakeSystemd) { f.annotated["web.service"] = "b" })
		d.Reload(ctx)
		bsqSleep(30)
		var leases []string
		for _, s := range d.supervisors() {
			leases = append(leases, s.Lease)
		}
		if waiting, events := q.state(); waiting != 1 || len(events) != 1 || !slices.Equal(leases, []string{"a"}) {
			t.Fatalf("re-annotated while a's stop waits: %d waiting, %v, supervisors %v; want a's stop alone, lease a being removed\n%s", waiting, events, leases, logs)
		}
		if !q.isActive("web.service") || store.record("a").Present || store.record("b").Present {
			t.Fatalf("while a's stop waits: web.service active %t, records %v, %v", q.isActive("web.service"), store.record("a"), store.record("b"))
		}
		q.turn(t)
		bsqSleep(5)
		d.Reload(ctx) // what the end of the removal asks of the loop
		bsqSleep(5)
		if waiting, events := q.state(); waiting != 1 || !slices.Equal(events, []string{"queued web.service", "stopped web.service", "queued web.service"}) {
			t.Fatalf("after a's stop: %d waiting, %v; want b's startup stop queued after a's result\n%s", waiting, events, logs)
		}
		if q.isActive("web.service") {
			t.Fatal("web.service started while lease b's startup stop waits")
		}
		q.turn(t)
		bsqSleep(30)
		if !heldBy(store, "b", "node-a") || !q.isActive("web.service") {
			t.Fatalf("after both stops: record b %v, web.service active %t\n%s", store.record("b"), q.isActive("web.service"), logs)
		}
		if waiting, events := q.state(); waiting != 0 || len(events) != 4 {
			t.Fatalf("%d stops waiting, %v", waiting, events)
		}
	})
}

// Probe (holds): a shutdown while startup stops wait in the line does
// not wait for them (no lease is held), ends the supervisors, and the
// stops' results, when they come, take no step: nothing is acquired, no
// stop is queued again, and no goroutine is left behind (synctest.Test
// fails on one left blocked).
func TestBreakStopQueuedDaemonShutdownWhileStartupStopsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		annotated := map[string]string{}
		for i := range n {
			annotated[fmt.Sprintf("u%d.service", i)] = fmt.Sprintf("l%d", i)
		}
		q, store, d, logs := bsqDaemon(t, annotated)
		ctx, cancel := context.WithCancel(t.Context())
		d.Reload(ctx)
		bsqSleep(5)
		if waiting, _ := q.state(); waiting != n {
			t.Fatalf("%d startup stops waiting, want %d", waiting, n)
		}
		down := make(chan struct{})
		go func() {
			cancel()
			d.Shutdown(context.Background())
			close(down)
		}()
		bsqSleep(60)
		select {
		case <-down:
		default:
			t.Fatalf("Shutdown did not return within a minute while startup stops wait:\n%s", logs)
		}
		for _, s := range d.supervisors() {
			select {
			case <-s.Done():
			default:
				t.Fatalf("supervisor of %s not ended by Shutdown", s.Lease)
			}
		}
		for range n {
			q.turn(t)
		}
		bsqSleep(60)
		waiting, events := q.state()
		if waiting != 0 || len(events) != 2*n {
			t.Fatalf("after the results came to ended supervisors: %d waiting, %v; want none, %d queued and stopped once each", waiting, events, n)
		}
		for i := range n {
			if r := store.record(fmt.Sprintf("l%d", i)); r.Present {
				t.Fatalf("lease l%d written after Shutdown: %v", i, r)
			}
		}
	})
}
