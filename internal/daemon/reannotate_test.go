package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// quietStore is the real store without wake-ups or announcements: a
// subscription waits on the network, which a synctest bubble does not
// count as blocked, so its fake clock would never move. Wake-ups only
// hurry observations; announcements only steer handoffs.
type quietStore struct{ *redislease.Store }

func (quietStore) Wakeups(ctx context.Context, _ []string) <-chan redislease.Wake {
	ch := make(chan redislease.Wake)
	context.AfterFunc(ctx, func() { close(ch) })
	return ch
}

func (quietStore) SetAnnouncements(context.Context, []redislease.Announcement) error { return nil }

// clusterNode is one node's daemon over a real Redis, with its own fake
// systemd; a start while another node's systemd has the unit active fails
// the test.
type clusterNode struct {
	*fakeSystemd
	t     *testing.T
	name  string
	peers *[]*clusterNode
	d     *Daemon
	store *redislease.Store
	logs  *syncBuffer
}

func (n *clusterNode) Start(ctx context.Context, unit string) error {
	for _, p := range *n.peers {
		if p != n && p.isActive(unit) {
			n.t.Errorf("%s started %s at %s while %s ran it: two copies", n.name, unit, time.Now().Format("15:04:05.000"), p.name)
		}
	}
	return n.fakeSystemd.Start(ctx, unit)
}

func newClusterNode(t *testing.T, srv *redistest.Server, peers *[]*clusterNode, name, lease string) *clusterNode {
	t.Helper()
	tm, err := testTiming.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	store, err := redislease.New(redislease.Config{URL: srv.URL(), KeyPrefix: "unitlease:", Node: name,
		ReplyMax: tm.ReplyMax, LeaseSpan: tm.LeaseSpan})
	if err != nil {
		t.Fatal(err)
	}
	n := &clusterNode{fakeSystemd: newFakeSystemd(map[string]string{"db.service": lease}), t: t, name: name, peers: peers,
		store: store, logs: &syncBuffer{}}
	cfg := &config.Config{Node: name, Timing: tm}
	n.d = New(cfg, logging.Text(n.logs, slog.LevelInfo), quietStore{store}, n, unitctl.Config{}, func(string) {})
	*peers = append(*peers, n)
	t.Cleanup(n.stop)
	return n
}

// annotate changes db.service's lease on this node and reloads.
func (n *clusterNode) annotate(ctx context.Context, lease string) {
	n.set(func(f *fakeSystemd) { f.annotated["db.service"] = lease })
	n.d.Reload(ctx)
}

// stop is SIGTERM, then the store's end: inside the bubble, before it
// ends (a cleanup of the bubble's test).
func (n *clusterNode) stop() {
	n.d.Shutdown(context.Background())
	n.store.Close()
}

// rolling runs db.service under lease A on two nodes, node-1 leading, and
// re-annotates it to lease B one node at a time, first in the order
// given, waiting five lease spans after the first; at no start does
// another node run it, and in the end exactly one node runs it.
func rolling(t *testing.T, holderFirst bool) {
	srv := redistest.Start(t, redistest.Options{})
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var nodes []*clusterNode
		n1 := newClusterNode(t, srv, &nodes, "node-1", "A")
		n2 := newClusterNode(t, srv, &nodes, "node-2", "A")
		n1.d.Reload(ctx)
		time.Sleep(30 * time.Second)
		n2.d.Reload(ctx)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !n1.isActive("db.service") || n2.isActive("db.service") {
			t.Fatalf("node-1 does not lead A:\n%s", n1.logs)
		}
		first, second := n2, n1
		if holderFirst {
			first, second = n1, n2
		}
		first.annotate(ctx, "B")
		span := n1.d.cfg.Timing.LeaseSpan
		time.Sleep(5 * span)
		synctest.Wait()
		// Whichever node runs A now, the one on B waits for it, and says so.
		runner, waiter := n1, n2
		if holderFirst {
			runner, waiter = n2, n1
		}
		if !runner.isActive("db.service") || waiter.isActive("db.service") {
			t.Fatalf("%s does not run db.service under A, or %s, on B, took it:\n%s\n%s", runner.name, waiter.name, runner.logs, waiter.logs)
		}
		if !strings.Contains(waiter.logs.String(), "db.service: held under lease A by "+runner.name) {
			t.Errorf("%s does not say why it waits:\n%s", waiter.name, waiter.logs)
		}
		second.annotate(ctx, "B")
		time.Sleep(5 * span)
		synctest.Wait()
		running := 0
		for _, n := range nodes {
			if n.isActive("db.service") {
				running++
			}
		}
		if running != 1 {
			t.Fatalf("db.service runs on %d nodes after the re-annotation, want 1:\nnode-1:\n%s\nnode-2:\n%s", running, n1.logs, n2.logs)
		}
	})
}

// TestRollingReannotationStandbyFirst: the standby is re-annotated first;
// it does not take the unit while the holder renews the old lease, and
// the unit moves once the holder is re-annotated too.
func TestRollingReannotationStandbyFirst(t *testing.T) { rolling(t, false) }

// TestRollingReannotationHolderFirst: the holder is re-annotated first: it
// hands lease A over to the standby, still on A, whose start there keeps
// the holder's new lease B out until the standby, too, is re-annotated.
func TestRollingReannotationHolderFirst(t *testing.T) { rolling(t, true) }
