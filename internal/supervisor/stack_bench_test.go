package supervisor

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// parkingUnits parks every stop until gate closes, and counts the
// stops parked.
type parkingUnits struct {
	parked sync.WaitGroup
	gate   chan struct{}
}

func (u *parkingUnits) Start(context.Context, string, Env) error { return nil }
func (u *parkingUnits) StartOrder(_ context.Context, units []string) ([]string, error) {
	return units, nil
}
func (u *parkingUnits) Stop(context.Context, string, func()) (bool, error) {
	u.parked.Done()
	<-u.gate
	return false, nil
}

// BenchmarkParkedStopStack reports the goroutine stack each lease holds
// while its first stop (rule 6) waits for systemd, as thousands do when a
// daemon starts: the supervisors take their first step (the journal
// entry through the daemon's asynchronous handler included) and park in
// Units.Stop. stack-B/lease is the runtime's stack memory in use per
// parked lease, read once all are parked, in the first round (the
// goroutines of a round go on after it, and later rounds would count
// them against the next).
//
//	go test -run '^$' -bench ParkedStopStack ./internal/supervisor
func BenchmarkParkedStopStack(b *testing.B) {
	const leases = 2000
	journal := logging.NewAsync(logging.Text(io.Discard, slog.LevelInfo).Handler(), logging.QueueMax)
	defer journal.Close(0)
	log := slog.New(journal)
	var per float64
	for b.Loop() {
		u := &parkingUnits{gate: make(chan struct{})}
		u.parked.Add(leases)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		base := runtime.NumGoroutine()
		ends := make([]func(), 0, leases)
		for i := range leases {
			m, err := policy.New(policy.Config{Timing: testTiming, Seed: uint64(i)})
			if err != nil {
				b.Fatal(err)
			}
			s := New("demo", []string{"demo.service"}, "node-a", m, &fakeStore{noRelease: true}, u, BootClock(), log)
			ends = append(ends, s.Launch(context.Background()))
		}
		u.parked.Wait()
		for runtime.NumGoroutine() > base+leases {
			runtime.Gosched() // the goroutines that handed a stop on are gone
		}
		runtime.ReadMemStats(&after)
		if per == 0 {
			per = float64(after.StackInuse-before.StackInuse) / leases
		}
		close(u.gate)
		for _, end := range ends {
			end()
		}
	}
	b.ReportMetric(per, "stack-B/lease")
}
