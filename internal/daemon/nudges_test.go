package daemon

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// gatedObserve is wakeStore whose observations wait for gate while it
// is set, counting how many wait together.
type gatedObserve struct {
	*wakeStore

	mu       sync.Mutex
	gate     chan struct{} // nil: observations go through
	waiting  int
	most     int
	observed map[string]int
}

func (w *gatedObserve) Observe(ctx context.Context, name string) (policy.Record, error) {
	w.mu.Lock()
	w.observed[name]++
	gate := w.gate
	if gate != nil {
		w.waiting++
		w.most = max(w.most, w.waiting)
	}
	w.mu.Unlock()
	if gate != nil {
		<-gate
		w.mu.Lock()
		w.waiting--
		w.mu.Unlock()
	}
	return w.memStore.Observe(ctx, name)
}

// hold makes the observations from now on wait, and forgets the counts.
func (w *gatedObserve) hold() chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate = make(chan struct{})
	w.most, w.observed = 0, map[string]int{}
	return w.gate
}

// TestResyncNudgesStandbysFewAtATime: a resubscription (a Redis
// reconnect) nudges every standby lease, and each nudge's observation is
// a Redis read. A goroutine for each, as before, put one read per lease
// in flight at once: 200 here, thousands on a daemon that watches
// thousands of leases another node holds, and the runtime keeps every
// goroutine descriptor it made. Now at most nudgeWorkers observe at once,
// and every standby still observes.
func TestResyncNudgesStandbysFewAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		annotated := map[string]string{}
		mem := newMemStore()
		for i := range n {
			lease := fmt.Sprintf("l%03d", i)
			annotated[fmt.Sprintf("u%03d.service", i)] = lease
			mem.steal(lease, "node-b")
		}
		store := &gatedObserve{wakeStore: &wakeStore{memStore: mem, wakes: make(chan redislease.Wake)}, observed: map[string]int{}}
		d, _, logs := startingDaemon(t, newFakeSystemd(annotated), store, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		<-firstReloading(ctx, d)
		synctest.Wait()
		for _, s := range d.supervisors() {
			if st := s.Status(); st.Role != policy.Standby.String() {
				t.Fatalf("lease %s is %s before the resync; want standby\n%s", s.Lease, st.Role, logs)
			}
		}
		gate := store.hold()
		store.wakes <- redislease.Wake{Resync: true}
		synctest.Wait()
		store.mu.Lock()
		most := store.most
		store.mu.Unlock()
		if most > nudgeWorkers {
			t.Errorf("%d observations of %d standbys waited on Redis at once after a resync; want at most %d", most, n, nudgeWorkers)
		}
		close(gate)
		synctest.Wait()
		store.mu.Lock()
		defer store.mu.Unlock()
		for _, s := range d.supervisors() {
			if store.observed[s.Lease] == 0 {
				t.Fatalf("lease %s: no observation after the resync nudged it", s.Lease)
			}
		}
	})
}
