package supervisor

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// oddStore is fakeStore whose lease key holds a Redis list: Observe
// returns exactly what redislease.Store.Observe returns for one since
// 17b3d3a (Odd.garbage): a present record with the marker as Raw, and a
// *GarbageError whose Value is the Odd's Head, which is "" for every
// type but a string.
type oddStore struct{ *fakeStore }

func (o oddStore) Observe(context.Context, string) (policy.Record, error) {
	return policy.Record{Present: true, Raw: "\x00odd:list:0:"},
		&redislease.GarbageError{Key: "unitlease:lease:demo", Value: "", Reason: "a Redis list, not a string"}
}

// TestGarbageOfAnotherTypeIsJournalled: garbage is journalled once per
// message. Before, once per value, compared with "" at first: a lease key
// that held a list (no value, only a type) or the empty string was never
// journalled, and the operator never learnt why the lease did not move.
func TestGarbageOfAnotherTypeIsJournalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs, units, logs := &fakeStore{t: t, noRelease: true}, &fakeUnits{}, &bytes.Buffer{}
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		s := New("demo", []string{"demo.service"}, "node-a", m, oddStore{fs}, units, BootClock(), logging.Text(logs, slog.LevelDebug))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if _, starts, _ := units.state(); starts != 0 {
			t.Fatalf("started %d times over a list", starts)
		}
		if n := strings.Count(logs.String(), "UNITLEASE_EVENT=garbage"); n != 1 {
			t.Errorf("a lease key holding a Redis list was reported %d times in 60 s of failed observations, want once:\n%s", n, logs)
		}
	})
}
