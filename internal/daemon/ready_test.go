package daemon

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// all is every message sent, in order.
func (n *notes) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.m)
}

func (n *notes) count(s string) int {
	c := 0
	for _, m := range n.all() {
		if m == s {
			c++
		}
	}
	return c
}

// firstReloading runs d's first discovery on a goroutine of its own;
// the channel closes when it returns.
func firstReloading(ctx context.Context, d *Daemon) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		d.firstReload(ctx)
		close(done)
	}()
	return done
}

// TestReadyDoesNotWaitForEveryUnit: a first discovery that takes longer
// than ReadyWithin (thousands of units to validate) does not hold READY=1
// back: it goes out at ReadyWithin, after a STATUS= that says how far the
// start has got, and only once.
func TestReadyDoesNotWaitForEveryUnit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(annotatedUnits(30))
		slow := make(chan struct{})
		sd.slowCheck = slow
		d, n, _ := startingDaemon(t, sd, newMemStore(), nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := firstReloading(ctx, d)
		time.Sleep(ReadyWithin)
		synctest.Wait()
		sent := n.all()
		if n.count("READY=1") != 1 {
			t.Fatalf("after ReadyWithin with the discovery still validating, sent %q; want READY=1 once", sent)
		}
		i := slices.Index(sent, "READY=1")
		if i == 0 || !strings.HasPrefix(sent[i-1], "STATUS=starting: validating the units of 30 leases (0 of 30 units validated)") {
			t.Fatalf("sent %q; want a STATUS= of the start's progress before READY=1", sent)
		}
		close(slow)
		<-done
		if n.count("READY=1") != 1 {
			t.Fatalf("sent %q; want READY=1 once", n.all())
		}
		if st := n.all(); !strings.HasPrefix(st[len(st)-1], "STATUS=") || strings.Contains(st[len(st)-1], ".service") {
			t.Fatalf("last sent %q, want the summary of 30 units by count", st[len(st)-1])
		}
	})
}

// TestReadyAfterAQuickDiscovery: a discovery quicker than ReadyWithin is
// done when READY=1 goes out, as before: its supervisors run.
func TestReadyAfterAQuickDiscovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		d, n, _ := startingDaemon(t, sd, newMemStore(), nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.firstReload(ctx)
		sent := n.all()
		if len(sent) < 2 || sent[len(sent)-2] != "READY=1" || !strings.HasSuffix(sent[len(sent)-1], ": db.service") {
			t.Fatalf("sent %q; want READY=1, then the summary", sent)
		}
		if d.find("db") == nil {
			t.Fatal("READY=1 sent before the lease's supervisor ran")
		}
		time.Sleep(2 * ReadyWithin)
		synctest.Wait()
		if n.count("READY=1") != 1 {
			t.Fatalf("sent %q; want READY=1 once", n.all())
		}
	})
}
