package redislease

import (
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// TestReleaseOfferedToANode: a release that names the next holder writes
// it in the record (as Encode does), on the lease key and its unit keys;
// every node reads it back, and any node may acquire over it (the wait
// for the others is the policy's).
func TestReleaseOfferedToANode(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b, c := newStore(t, srv, "node-a"), newStore(t, srv, "node-b"), newStore(t, srv, "node-c")
	units := []string{"vpn.service"}
	l, err := a.AcquireUnits(bg, "vpn", units, policy.Absent)
	if err != nil {
		t.Fatal(err)
	}
	l.Next = "node-b"
	rel, err := a.ReleaseUnits(bg, "vpn", units, l)
	if err != nil || !rel.Released || rel.Next != "node-b" {
		t.Fatalf("release to node-b: %+v, %v", rel, err)
	}
	if got := srv.Command("GET", "unitlease:lease:vpn"); got != Encode(rel) || got != rel.Raw {
		t.Fatalf("stored %s, Encode gives %s", got, Encode(rel))
	}
	if got := srv.Command("GET", a.UnitKey("vpn.service")); got != `{"lease":"vpn",`+rel.Raw[1:] {
		t.Fatalf("unit key holds %s", got)
	}
	seen, err := c.ObserveUnits(bg, "vpn", units)
	if err != nil || seen.Next != "node-b" || !seen.Released {
		t.Fatalf("node-c observes %+v, %v", seen, err)
	}
	seenB, err := b.ObserveUnits(bg, "vpn", units)
	if err != nil || seenB.Next != "node-b" {
		t.Fatalf("node-b observes %+v, %v", seenB, err)
	}
	got, err := c.AcquireUnits(bg, "vpn", units, seen)
	if err != nil || got.Holder != "node-c" || got.Next != "" {
		t.Fatalf("node-c acquires over the offered record: %+v, %v", got, err)
	}

	// A name that is not a node's is refused before Redis sees it.
	got.Next = "no such node"
	if _, err := c.ReleaseUnits(bg, "vpn", units, got); err == nil {
		t.Fatal("a release to an invalid node name was written")
	}
}
