package daemon

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
)

// Adversarial probes of unit keys through the daemon's reloads.

// partialMove runs lease A = {db.service, web.service} on two nodes,
// node-1 leading, and moves db.service alone to lease B one node at a
// time (the other node first, or the holder first): every reload on the
// holder removes A and adds it anew with web.service alone. At no start
// does another node run the unit (clusterNode.Start), and in the end each
// unit runs on exactly one node.
func partialMove(t *testing.T, holderFirst bool) {
	srv := redistest.Start(t, redistest.Options{})
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var nodes []*clusterNode
		n1 := newClusterNode(t, srv, &nodes, "node-1", "A")
		n2 := newClusterNode(t, srv, &nodes, "node-2", "A")
		for _, n := range nodes {
			n.set(func(f *fakeSystemd) { f.annotated["web.service"] = "A" })
		}
		n1.d.Reload(ctx)
		time.Sleep(30 * time.Second)
		n2.d.Reload(ctx)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !n1.isActive("db.service") || !n1.isActive("web.service") || n2.isActive("db.service") {
			t.Fatalf("node-1 does not lead A:\n%s", n1.logs)
		}
		first, second := n2, n1
		if holderFirst {
			first, second = n1, n2
		}
		span := n1.d.cfg.Timing.LeaseSpan
		count := func() string {
			s := ""
			for _, u := range []string{"db.service", "web.service"} {
				k := 0
				for _, n := range nodes {
					if n.isActive(u) {
						k++
					}
				}
				s += fmt.Sprintf("%s on %d; ", u, k)
			}
			return s
		}
		first.annotate(ctx, "B")
		time.Sleep(5 * span)
		synctest.Wait()
		if got := count(); got != "db.service on 1; web.service on 1; " {
			t.Fatalf("halfway: %s\nnode-1:\n%s\nnode-2:\n%s", got, n1.logs, n2.logs)
		}
		second.annotate(ctx, "B")
		time.Sleep(5 * span)
		synctest.Wait()
		if got := count(); got != "db.service on 1; web.service on 1; " {
			t.Fatalf("after the move: %s\nnode-1:\n%s\nnode-2:\n%s", got, n1.logs, n2.logs)
		}
		// And back, the other way round: A -> B -> A.
		second.annotate(ctx, "A")
		time.Sleep(span / 4)
		first.annotate(ctx, "A")
		time.Sleep(5 * span)
		synctest.Wait()
		if got := count(); got != "db.service on 1; web.service on 1; " {
			t.Fatalf("after the move back: %s\nnode-1:\n%s\nnode-2:\n%s", got, n1.logs, n2.logs)
		}
	})
}

// TestBreakPartialMoveStandbyFirst moves one unit of a two-unit lease,
// the standby's node first.
func TestBreakPartialMoveStandbyFirst(t *testing.T) { partialMove(t, false) }

// TestBreakPartialMoveHolderFirst moves one unit of a two-unit lease, the
// holder's node first.
func TestBreakPartialMoveHolderFirst(t *testing.T) { partialMove(t, true) }
