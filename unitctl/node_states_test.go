package unitctl

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestNodeStatesReadTogether: reads of many units' states asked for at
// once each get their own unit's state, an alias is found under its own
// name, and reads queued together go out as one call.
func TestNodeStatesReadTogether(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	files := map[string]string{"ul-states-target.service": plainService}
	var units []string
	for i := range 100 {
		u := fmt.Sprintf("ul-states-%03d.service", i)
		files[u] = plainService
		units = append(units, u)
	}
	alias := "ul-states-alias.service"
	if err := os.Symlink(filepath.Join(unitDir, "ul-states-target.service"), filepath.Join(unitDir, alias)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(unitDir, alias)) })
	installUnits(t, files)
	var running []string
	for i := 0; i < len(units); i += 2 {
		running = append(running, units[i])
	}
	systemctl(t, append([]string{"start"}, append(running, "ul-states-target.service")...)...)

	ctx := ctxFor(t, time.Minute)
	want := func(u string) string {
		for _, r := range running {
			if r == u {
				return "active"
			}
		}
		return "inactive"
	}
	var wg sync.WaitGroup
	for _, u := range append(units, alias, "ul-states-nonexistent.service") {
		wg.Go(func() {
			st, err := s.State(ctx, u)
			switch {
			case err != nil:
				t.Errorf("%s: %v", u, err)
			case u == alias && st.ActiveState != "active":
				t.Errorf("alias %s: %s, want active (the target runs)", u, st.ActiveState)
			case u != alias && st.ActiveState != want(u):
				t.Errorf("%s: %s, want %s", u, st.ActiveState, want(u))
			}
		})
	}
	wg.Wait()

	// Reads queued while none is in flight go out in one call.
	reads := make([]*stateRead, len(units))
	s.reads.mu.Lock()
	for i, u := range units {
		reads[i] = &stateRead{ctx: ctx, unit: u, done: make(chan struct{})}
	}
	s.reads.queued = append(s.reads.queued, reads...)
	busy := s.reads.running
	s.reads.running = true
	s.reads.mu.Unlock()
	if busy {
		t.Fatal("a read was still in flight")
	}
	before := s.reads.calls.Load()
	s.readStates()
	if calls := s.reads.calls.Load() - before; calls != 1 {
		t.Errorf("%d reads took %d calls, want 1", len(units), calls)
	}
	for _, r := range reads {
		<-r.done
		if !r.found || r.err != nil || r.st.ActiveState != want(r.unit) {
			t.Errorf("%s: found %v, err %v, state %q, want %s", r.unit, r.found, r.err, r.st.ActiveState, want(r.unit))
		}
	}
}
