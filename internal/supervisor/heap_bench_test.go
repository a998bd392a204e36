package supervisor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// renewalMeter marks its lease renewed once it saw renewals succeed.
type renewalMeter struct {
	renewals atomic.Int32
	want     int32
	renewed  *sync.WaitGroup
}

func (m *renewalMeter) Answered(a policy.ActionKind, ev policy.Event, _ time.Duration) {
	if a == policy.Renew && ev.Kind == policy.RenewOK && m.renewals.Add(1) == m.want {
		m.renewed.Done()
	}
}
func (m *renewalMeter) Journaled(policy.Journal, policy.Cause) {}
func (m *renewalMeter) Garbage()                               {}

// manyUnits runs every start and stop at once.
type manyUnits struct{}

func (manyUnits) Start(context.Context, string, Env) error { return nil }
func (manyUnits) StartOrder(_ context.Context, units []string) ([]string, error) {
	return units, nil
}
func (manyUnits) Stop(context.Context, string, func()) (bool, error) { return false, nil }

// BenchmarkHeldLeaseHeap reports the heap each held lease keeps between
// its steps: a thousand supervisors, launched as the daemon launches
// them, on one redislease.Store over a real redis-server, acquire their
// leases, start their units and renew each lease three times; then
// heap-B/lease is the heap in use after a collection, less the heap
// before the supervisors were made, per lease. The supervisor, its policy machine,
// its timer, its status and what its requests left behind are in it;
// the daemon's own per-lease state, the metrics and systemd's side are
// not.
//
//	go test -run '^$' -bench HeldLeaseHeap ./internal/supervisor
func BenchmarkHeldLeaseHeap(b *testing.B) {
	const leases = 1000
	srv := redistest.Start(b, redistest.Options{})
	timing, err := testTiming.Resolved()
	if err != nil {
		b.Fatal(err)
	}
	journal := logging.NewAsync(logging.Text(io.Discard, slog.LevelInfo).Handler(), logging.QueueMax)
	defer journal.Close(0)
	log := slog.New(journal)
	var perLease float64
	round := 0
	for b.Loop() {
		round++
		store, err := redislease.New(redislease.Config{URL: srv.URL(), KeyPrefix: fmt.Sprintf("r%d:", round), Node: "node-a",
			ReplyMax: timing.ReplyMax, LeaseSpan: timing.LeaseSpan})
		if err != nil {
			b.Fatal(err)
		}
		names := make([]string, leases)
		units := make([][]string, leases)
		meters := make([]renewalMeter, leases)
		ends := make([]func(), 0, leases)
		var renewed sync.WaitGroup
		renewed.Add(leases)
		for i := range leases {
			names[i] = fmt.Sprintf("lease-%04d", i)
			units[i] = []string{names[i] + ".service"}
			meters[i] = renewalMeter{want: 3, renewed: &renewed}
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range leases {
			m, err := policy.New(policy.Config{Timing: timing, Seed: uint64(i), Identified: true, Node: "node-a"})
			if err != nil {
				b.Fatal(err)
			}
			s := New(names[i], units[i], "node-a", m, store, manyUnits{}, BootClock(), log)
			s.SetMeter(&meters[i])
			ends = append(ends, s.Launch(context.WithoutCancel(b.Context())))
		}
		renewed.Wait()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if perLease == 0 {
			perLease = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / leases
		}
		for _, end := range ends {
			end()
		}
		store.Close()
		runtime.KeepAlive(meters)
	}
	b.ReportMetric(perLease, "heap-B/lease")
}
