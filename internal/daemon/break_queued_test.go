package daemon

// Review tests of the daemon's queued starts (unitsOf.StartQueued over a
// Manager that queues, 4f1c273): a start that waited while the lease was
// lost and then gets its turn, and a shutdown while a start waits.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/unitctl"
)

// bqQueuedSystemd is fakeSystemd whose StartQueued (what the daemon finds
// on *unitctl.Systemd) keeps each start waiting until the test gives it
// its turn, and takes it out of the line with a *unitctl.JobError when
// its ctx ends, as unitctl's line does. A start given its turn runs as
// systemd would run it: the guard (ExecStartPre=) asks the daemon first
// and a refusal fails the job, the unit left inactive.
type bqQueuedSystemd struct {
	*fakeSystemd
	d *Daemon

	mu    sync.Mutex
	line  []*bqQueuedStart
	calls int
}

type bqQueuedStart struct {
	ctx    context.Context
	unit   string
	done   func(error)
	over   bool
	result chan error // what done was called with
}

func (q *bqQueuedSystemd) StartQueued(ctx context.Context, unit string, done func(error)) {
	s := &bqQueuedStart{ctx: ctx, unit: unit, result: make(chan error, 1)}
	s.done = func(err error) { s.result <- err; done(err) }
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls++
	q.line = append(q.line, s)
	context.AfterFunc(ctx, func() {
		q.mu.Lock()
		if s.over {
			q.mu.Unlock()
			return
		}
		s.over = true
		q.mu.Unlock()
		s.done(&unitctl.JobError{Unit: unit, Op: "start", Err: ctx.Err()})
	})
}

// waiting is the starts still in the line.
func (q *bqQueuedSystemd) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, s := range q.line {
		if !s.over {
			n++
		}
	}
	return n
}

// turn gives the first start still in the line its turn, on a goroutine
// of its own, and returns it; nil if none waits.
func (q *bqQueuedSystemd) turn() *bqQueuedStart {
	q.mu.Lock()
	var s *bqQueuedStart
	for len(q.line) > 0 && s == nil {
		if !q.line[0].over {
			s = q.line[0]
			s.over = true
		}
		q.line = q.line[1:]
	}
	q.mu.Unlock()
	if s == nil {
		return nil
	}
	go func() {
		if err := q.d.Guard(context.Background(), s.unit); err != nil {
			s.done(fmt.Errorf("%s: the guard refused the start: %w", s.unit, err))
			return
		}
		s.done(q.fakeSystemd.Start(s.ctx, s.unit))
	}()
	return s
}

func bqQueuedDaemon(t *testing.T) (*bqQueuedSystemd, *memStore, *Daemon, *syncBuffer) {
	t.Helper()
	tm, err := testTiming.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	q := &bqQueuedSystemd{fakeSystemd: newFakeSystemd(map[string]string{"web.service": "a"})}
	store := newMemStore()
	logs := &syncBuffer{}
	q.d = New(&config.Config{Node: "node-a", Timing: tm}, logging.Text(logs, slog.LevelInfo), store, q, unitctl.Config{}, func(string) {})
	return q, store, q.d, logs
}

// bqStartWaiting reloads and waits (on the bubble's clock) until lease a is
// held and its start waits in the line.
func bqStartWaiting(t *testing.T, ctx context.Context, q *bqQueuedSystemd, store *memStore, d *Daemon, logs fmt.Stringer) {
	t.Helper()
	d.Reload(ctx)
	for range 60 {
		time.Sleep(time.Second)
		synctest.Wait()
		if q.waiting() == 1 {
			break
		}
	}
	if q.waiting() != 1 || !heldBy(store, "a", "node-a") || q.isActive("web.service") {
		t.Fatalf("%d starts waiting, record %v, web.service active %t; want 1, held by node-a, inactive:\n%s",
			q.waiting(), store.record("a"), q.isActive("web.service"), logs)
	}
	q.fakeSystemd.mu.Lock()
	env := q.env["web.service"]
	q.fakeSystemd.mu.Unlock()
	if env == nil {
		t.Fatalf("the queued start did not write the unit's environment first")
	}
}

// TestBreakQueuedDaemonLateTurnAfterLossRefused probes the late start:
// lease a's start waits in the line, the lease is lost meanwhile
// (node-b holds it and keeps renewing), node-a stops the unit and goes
// standby, and only then does the start waiting get its turn. The
// supervisor cannot take it back out of the line (its ctx is the
// supervisor's, which goes on), so the StartUnit is made; it holds only
// because the guard refuses it: web.service never runs on node-a while
// node-b holds the lease, and node-a does not take the late result as
// its unit running.
func TestBreakQueuedDaemonLateTurnAfterLossRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, store, d, logs := bqQueuedDaemon(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer func() { cancel(); d.Shutdown(context.WithoutCancel(ctx)) }()
		bqStartWaiting(t, ctx, q, store, d, logs)
		store.steal("a", "node-b")
		for range 5 {
			time.Sleep(time.Second)
			holdAs(store, "a", "node-b") // node-b renews
			synctest.Wait()
		}
		sup := d.supervisors()[0]
		if st := sup.Status(); st.Holding {
			t.Fatalf("node-a still holds lease a after it was lost: %+v\n%s", st, logs)
		}
		late := q.turn()
		if late == nil {
			t.Fatalf("the start that waited left the line (its supervisor goes on):\n%s", logs)
		}
		err := <-late.result
		synctest.Wait()
		if q.isActive("web.service") {
			t.Fatalf("web.service runs on node-a, whose start waited while the lease was lost, while node-b holds it (record %v): two copies\n%s", store.record("a"), logs)
		}
		if err == nil || !strings.Contains(logs.String(), "start refused") {
			t.Fatalf("the late start: %v; want the guard's refusal, journalled\n%s", err, logs)
		}
		if st := sup.Status(); st.Role == "leader" || st.Holding {
			t.Fatalf("the late start's result made node-a %+v", st)
		}
	})
}

// TestBreakQueuedDaemonShutdownWhileQueued probes a shutdown while lease
// a's start waits in the line: the daemon hands the lease off (the stop,
// the release) and ends the supervisor, whose ctx ends and takes the start
// out of the line with an error that no step takes. It holds: Shutdown
// returns, the lease is released, the start reports once with the end of
// its ctx, and web.service never ran.
func TestBreakQueuedDaemonShutdownWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, store, d, logs := bqQueuedDaemon(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		bqStartWaiting(t, ctx, q, store, d, logs)
		q.mu.Lock()
		waiting := q.line[0]
		q.mu.Unlock()
		down := make(chan struct{})
		go func() {
			cancel()
			d.Shutdown(context.Background())
			close(down)
		}()
		for range 60 {
			time.Sleep(time.Second)
			synctest.Wait()
			select {
			case <-down:
			default:
				continue
			}
			break
		}
		select {
		case <-down:
		default:
			t.Fatalf("Shutdown did not return within a minute with a start waiting in the line:\n%s", logs)
		}
		select {
		case err := <-waiting.result:
			var je *unitctl.JobError
			if !errors.As(err, &je) || !errors.Is(err, context.Canceled) {
				t.Fatalf("the waiting start reported %v, want its ctx's end", err)
			}
		default:
			t.Fatalf("the start waiting in the line never reported after Shutdown (its supervisor ended)")
		}
		if q.turn() != nil {
			t.Fatal("a start still waits in the line after Shutdown")
		}
		if r := store.record("a"); !r.Released || q.isActive("web.service") {
			t.Fatalf("after Shutdown: record %v, web.service active %t; want released, inactive\n%s", r, q.isActive("web.service"), logs)
		}
	})
}
