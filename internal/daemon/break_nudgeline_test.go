package daemon

// Review tests that try to break the line of nudges (nudged standbys
// step in a line that eight goroutines work through, 601e38e). The file
// uses nothing that 601e38e added, so it also runs on the commit before.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// bnlStore is wakeStore whose observations of the leases in slow wait
// for gate (Redis answering late, up to reply_max each, or a worker
// stuck), and whose history notes wait for notes while it is set.
type bnlStore struct {
	*wakeStore

	mu    sync.Mutex
	slow  map[string]bool
	gate  chan struct{}
	notes chan struct{} // nil: the notes go through
}

func (s *bnlStore) Observe(ctx context.Context, name string) (policy.Record, error) {
	s.mu.Lock()
	gate := s.gate
	slow := s.slow[name]
	s.mu.Unlock()
	if slow && gate != nil {
		<-gate
	}
	return s.memStore.Observe(ctx, name)
}

func (s *bnlStore) waitNotes() {
	s.mu.Lock()
	g := s.notes
	s.mu.Unlock()
	if g != nil {
		<-g
	}
}

func (s *bnlStore) NoteTransition(ctx context.Context, lease string, t redislease.Transition) error {
	s.waitNotes()
	return s.memStore.NoteTransition(ctx, lease, t)
}

func (s *bnlStore) NoteRelease(ctx context.Context, lease string, version uint64, why string) error {
	s.waitNotes()
	return s.memStore.NoteRelease(ctx, lease, version, why)
}

func (s *bnlStore) LastRelease(ctx context.Context, lease string) (*redislease.Release, error) {
	s.waitNotes()
	return s.memStore.LastRelease(ctx, lease)
}

// hold makes the slow leases' observations wait; the returned func lets
// them through (once).
func (s *bnlStore) hold() func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := make(chan struct{})
	s.gate = g
	return sync.OnceFunc(func() {
		s.mu.Lock()
		s.gate = nil
		s.mu.Unlock()
		close(g)
	})
}

// bnlOffset is CLOCK_BOOTTIME's lead over CLOCK_MONOTONIC as the test
// sets it (a suspend adds to it).
type bnlOffset struct {
	mu sync.Mutex
	o  supervisor.Offset
}

func (f *bnlOffset) read() (supervisor.Offset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.o, nil
}

func (f *bnlOffset) suspend(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.o.Lo += d
	f.o.Hi += d
}

// release writes node-b's record of lease as released by it (offered to
// next, if not ""), as its daemon's handoff does.
func (f *memStore) bnlRelease(lease, next string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.current(lease)
	cur.Version++
	cur.Released = true
	cur.Next = next
	f.write(lease, cur)
}

// bnlSetup is a daemon on node-a over a store where node-b holds eight
// slow leases (s0..s7, units s0..s7.service) and lease l (l.service),
// every one a standby here. The returned stuck makes the eight line
// workers busy: each is nudged with its observation held (a Redis that
// answers late); unstick lets them through.
type bnlSetup struct {
	d     *Daemon
	sd    *fakeSystemd
	store *bnlStore
	off   *bnlOffset
	logs  *syncBuffer
}

func bnlStart(t *testing.T, ctx context.Context, extra int) *bnlSetup {
	t.Helper()
	annotated := map[string]string{"l.service": "l"}
	mem := newMemStore()
	mem.steal("l", "node-b")
	slow := map[string]bool{}
	for i := range 8 {
		lease := fmt.Sprintf("s%d", i)
		annotated[lease+".service"] = lease
		mem.steal(lease, "node-b")
		slow[lease] = true
	}
	for i := range extra {
		lease := fmt.Sprintf("x%03d", i)
		annotated[lease+".service"] = lease
		mem.steal(lease, "node-b")
	}
	store := &bnlStore{wakeStore: &wakeStore{memStore: mem, wakes: make(chan redislease.Wake)}, slow: slow}
	sd := newFakeSystemd(annotated)
	d, _, logs := startingDaemon(t, sd, store, nil)
	off := &bnlOffset{}
	d.clock = supervisor.SuspendClock(off.read)
	<-firstReloading(ctx, d)
	synctest.Wait()
	for _, s := range d.supervisors() {
		if st := s.Status(); st.Role != policy.Standby.String() {
			t.Fatalf("lease %s is %s; want standby\n%s", s.Lease, st.Role, logs)
		}
	}
	return &bnlSetup{d: d, sd: sd, store: store, off: off, logs: logs}
}

// stick nudges the eight slow leases with their observations held, no
// time passing (their own polls are not due): eight line workers (or,
// before 601e38e, eight goroutines) wait on Redis.
func (b *bnlSetup) stick() (unstick func()) {
	unstick = b.store.hold()
	for i := range 8 {
		b.store.wakes <- redislease.Wake{Lease: fmt.Sprintf("s%d", i)}
	}
	synctest.Wait()
	return unstick
}

func (b *bnlSetup) sup(lease string) *supervisor.Supervisor {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	if r := b.d.sups[lease]; r != nil {
		return r.sup
	}
	return nil
}

// leads waits, in fake time, until lease leads here with its unit
// active, up to within; it returns how long that took.
func (b *bnlSetup) leads(t *testing.T, lease, unit string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		synctest.Wait()
		if s := b.sup(lease); s != nil && s.Status().Role == policy.Leader.String() && b.sd.isActive(unit) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("lease %s not led here %v after its release was published: %+v\n%s", lease, within, b.sup(lease).Status(), b.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBreakNudgeLineOverdueHolderWaitsBehindTheLine (idea 4): lease l's
// release is published while the line's eight workers wait on Redis, so
// l's nudged step waits in the line, its flag set. l's own poll takes
// the lease meanwhile. The machine then sleeps an hour (node-b took l
// meanwhile) and, before the suspend check notices, node-b's
// acquisition is published: the nudge of a holder whose wake-up is
// overdue, which should step at once and stop the unit. On 601e38e it
// did not: the nudge was deduplicated against l's old step still in
// line. It passed before 601e38e (the first nudge stepped at once on its
// own goroutine and cleared the flag), and passes now (an overdue
// supervisor's nudge has a flag of its own).
func TestBreakNudgeLineOverdueHolderWaitsBehindTheLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b := bnlStart(t, ctx, 0)
		unstick := b.stick()
		defer unstick()
		b.store.bnlRelease("l", "")
		b.store.wakes <- redislease.Wake{Lease: "l"}
		took := b.leads(t, "l", "l.service", 10*time.Second)
		t.Logf("l led %v after its release was published", took)
		b.store.steal("l", "node-b")
		b.off.suspend(time.Hour)
		b.store.wakes <- redislease.Wake{Lease: "l"} // node-b's acquisition
		synctest.Wait()                              // no time passes
		if b.sd.isActive("l.service") {
			t.Errorf("l's holder, an hour past its deadline, was nudged and l.service still runs (%+v): its nudge waits in the line behind Redis", b.sup("l").Status())
		}
		unstick()
		synctest.Wait()
		if b.sd.isActive("l.service") {
			t.Fatalf("once the line moved, l.service still runs:\n%s", b.logs)
		}
	})
}

// TestBreakNudgeLineReleaseTakenByPollWhileLineIsStuck (idea 1): with
// every line worker stuck on Redis (held for good here), a release
// offered to this node by name (handoff --to) is still taken, by the
// standby's own poll: within poll_max and two round trips, inside the
// handoff's wait (stop_wait + poll_max + 4 reply_max + 1s) and
// DeferStep. Logs how long it took (before 601e38e: at once).
func TestBreakNudgeLineReleaseTakenByPollWhileLineIsStuck(t *testing.T) {
	for _, next := range []string{"", "node-a"} {
		t.Run("next="+next, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				b := bnlStart(t, ctx, 0)
				unstick := b.stick()
				defer unstick()
				b.store.bnlRelease("l", next)
				b.store.wakes <- redislease.Wake{Lease: "l"}
				tm := b.d.cfg.Timing
				within := tm.PollMax + 2*tm.ReplyMax
				took := b.leads(t, "l", "l.service", within)
				t.Logf("released (next %q) with the line stuck: led after %v (poll_max %v)", next, took, tm.PollMax)
			})
		})
	}
}

// TestBreakNudgeLineHooksWhileNotesStuck (idea 3): nudged standbys
// acquire on line workers, and each acquisition's hook puts a note in the
// notes line, whose writers are all stuck on Redis; a release's hook
// too. No worker waits on the notes: every lease is taken and started
// with no time passing, and the line moves on.
func TestBreakNudgeLineHooksWhileNotesStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b := bnlStart(t, ctx, 40)
		notes := make(chan struct{})
		b.store.mu.Lock()
		b.store.notes = notes
		b.store.mu.Unlock()
		defer close(notes)
		for i := range 40 {
			b.store.bnlRelease(fmt.Sprintf("x%03d", i), "")
		}
		b.store.wakes <- redislease.Wake{Resync: true}
		synctest.Wait() // no time passes
		var missing []string
		for i := range 40 {
			lease := fmt.Sprintf("x%03d", i)
			if !b.sd.isActive(lease + ".service") {
				missing = append(missing, lease)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("with the notes line stuck, a resync's nudges left %d released leases untaken: %s\n%s", len(missing), strings.Join(missing, " "), b.logs)
		}
		// A hook under the lock of a step on a line worker: an
		// acquisition (above) and a release (a handoff), with the notes
		// still stuck, and a wake meanwhile.
		s := b.sup("x000")
		s.Handoff(ctx)
		b.store.wakes <- redislease.Wake{Lease: "x000"}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if b.sd.isActive("x000.service") {
			t.Fatalf("the handoff did not stop x000.service: %+v", s.Status())
		}
	})
}

// TestBreakNudgeLineReloadWhileNudgeInLine (ideas 2 and 5): lease l's
// nudge waits in the line when a reload removes l; a reload adds it
// back (a new supervisor). Its release is then published and the line
// moves: the old supervisor's step is refused, the new one's nudge is
// its own (not deduplicated against the old one's) and l is taken; a
// resync meanwhile races with both reloads (run under -race).
func TestBreakNudgeLineReloadWhileNudgeInLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b := bnlStart(t, ctx, 20)
		unstick := b.stick()
		defer unstick()
		b.store.wakes <- redislease.Wake{Lease: "l"} // lined
		old := b.sup("l")
		b.sd.set(func(f *fakeSystemd) { delete(f.annotated, "l.service") })
		resynced := make(chan struct{})
		go func() {
			defer close(resynced)
			for range 5 {
				select {
				case b.store.wakes <- redislease.Wake{Resync: true}:
				case <-ctx.Done():
					return
				}
			}
		}()
		b.d.Reload(ctx)
		if b.sup("l") != nil {
			t.Fatal("l still managed after its annotation was removed")
		}
		b.sd.set(func(f *fakeSystemd) { f.annotated["l.service"] = "l" })
		b.d.Reload(ctx)
		<-resynced
		synctest.Wait()
		nu := b.sup("l")
		if nu == nil || nu == old {
			t.Fatal("l not added back as a new supervisor")
		}
		unstick()
		synctest.Wait()
		b.store.bnlRelease("l", "")
		b.store.wakes <- redislease.Wake{Lease: "l"}
		synctest.Wait() // the line is free again: at once
		if !b.sd.isActive("l.service") {
			t.Fatalf("the re-added l did not take its published release at once once the line was free: %+v\n%s", nu.Status(), b.logs)
		}
		if st := old.Status(); st.Holding {
			t.Fatalf("the removed supervisor holds: %+v", st)
		}
	})
}

// TestBreakNudgeLineConcurrentAdds (idea 5): the line (through the notes'
// noteLine, which is a workLine now) takes work from many goroutines at
// once while its workers drain it and stop: every job runs, once, and
// never more than noteWriters at a time; no worker is left behind
// (synctest.Test fails on a goroutine left blocked).
func TestBreakNudgeLineConcurrentAdds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l noteLine
		var mu sync.Mutex
		inFlight, most, ran := 0, 0, map[int]int{}
		var adders sync.WaitGroup
		for g := range 64 {
			adders.Go(func() {
				for i := range 50 {
					id := g*50 + i
					l.add(func(context.Context) {
						mu.Lock()
						inFlight++
						most = max(most, inFlight)
						ran[id]++
						mu.Unlock()
						time.Sleep(time.Millisecond)
						mu.Lock()
						inFlight--
						mu.Unlock()
					})
					if i%7 == 0 {
						time.Sleep(3 * time.Millisecond) // let the line empty now and then
					}
				}
			})
		}
		adders.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != 64*50 {
			t.Fatalf("%d of %d jobs ran", len(ran), 64*50)
		}
		for id, n := range ran {
			if n != 1 {
				t.Fatalf("job %d ran %d times", id, n)
			}
		}
		if most > noteWriters {
			t.Fatalf("%d jobs at once; want at most %d", most, noteWriters)
		}
	})
}
