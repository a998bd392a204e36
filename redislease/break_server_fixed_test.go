package redislease

import (
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// TestBreakLiveRestoreIsAWitnessedRelease: a backup restored into the
// running Redis (DUMP/RESTORE, as backup tools do) brings back x's
// released record (version 2) under y's acquisition (3): the server's
// identity does not change. Before this commit z's store called the
// version below its floor garbage and z acquired nothing; now it is a
// value, and a change under the same server, so "witnessed": z takes it
// at once and starts while y runs (y learns only at its next renewal,
// up to retry later).
// Closed: a version below the highest one a node saw is an older state,
// whose release is not witnessed (policy: Machine.see).
func TestBreakLiveRestoreIsAWitnessedRelease(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	y, ly, rel, z, restore := handedOver(t, srv)
	restore()
	z.now = policy.Instant(time.Second)
	z.step(policy.Event{Kind: policy.Nudge}) // or its next poll: before y's renewal, 5 s after its acquisition
	if r, _, _ := z.m.Seen(); !r.Same(rel) {
		t.Fatalf("z sees %v, want x's release", r)
	}
	if z.started {
		held, _ := z.m.Held()
		_, err := y.Renew(bg, "vpn", ly)
		t.Fatalf("z acquired x's restored release (version %d, below y's %d) at once and started its unit (holds version %d) while y runs; "+
			"y learns at its next renewal: %v", rel.Version, ly.Version, held.Version, err)
	}
}
