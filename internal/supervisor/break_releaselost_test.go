package supervisor

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// TestBreakReleaseLostWhatTheEventCarries: the release's event for each
// thing the key may hold instead of the held record. Only this node's own
// later record extends it (and a release over the record carried then
// writes it released); its own release already written, another holder,
// a missing key and garbage do not, so the policy gives up as before.
// Holds.
func TestBreakReleaseLostWhatTheEventCarries(t *testing.T) {
	tokA := strings.Repeat("a", 32)
	for _, c := range []struct {
		name    string
		key     func(f *fakeStore, held policy.Record) // what the key holds instead
		extends bool
	}{
		{"own later record", func(f *fakeStore, held policy.Record) {
			later := held
			later.Version, later.StopFailed = 3, true
			f.write(later)
		}, true},
		{"own release written", func(f *fakeStore, held policy.Record) {
			rel := held
			rel.Version, rel.Released = 3, true
			f.write(rel)
		}, false},
		{"another holder", func(f *fakeStore, held policy.Record) {
			b := held
			b.Holder, b.Version, b.Token = "node-b", 3, strings.Repeat("b", 32)
			f.write(b)
		}, false},
		{"missing", func(f *fakeStore, held policy.Record) { f.raw = "" }, false},
		{"garbage", func(f *fakeStore, held policy.Record) { f.raw = "not a record" }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := &fakeStore{t: t}
			store.mu.Lock()
			held := store.write(policy.Record{Holder: "node-a", Version: 2, Token: tokA})
			c.key(store, held)
			store.mu.Unlock()
			s := demoSupervisor(t, []string{"demo.service"}, store, &fakeUnits{}, logging.Text(io.Discard, slog.LevelDebug))
			ev := s.release(t.Context(), held)
			if ev.Kind != policy.ReleaseLost || ev.Record.Extends(held) != c.extends {
				t.Fatalf("release over %q: %v (extends %t), want release_lost, extends %t", store.raw, ev, ev.Record.Extends(held), c.extends)
			}
			if !c.extends {
				return
			}
			again := ev.Record
			again.Next = "node-b"
			if ev2 := s.release(t.Context(), again); ev2.Kind != policy.ReleaseOK || !ev2.Record.Released || ev2.Record.Version != 4 {
				t.Fatalf("release over the carried record: %v", ev2)
			}
		})
	}
}
