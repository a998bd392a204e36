package supervisor

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/unitlease/unitlease/policy"
)

// hookStore calls observe before each observation.
type hookStore struct {
	*fakeStore
	observe func()
}

func (h hookStore) Observe(ctx context.Context, name string) (policy.Record, error) {
	h.observe()
	return h.fakeStore.Observe(ctx, name)
}

func hooked(t *testing.T, lease string, p *Steppers, observe func()) *Supervisor {
	t.Helper()
	m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	s := New(lease, []string{lease + ".service"}, "node-a", m, hookStore{&fakeStore{t: t}, observe}, &fakeUnits{}, BootClock(), slog.New(slog.DiscardHandler))
	s.SetSteppers(p)
	return s
}

// onStepper reports whether the calling goroutine is a stepper.
func onStepper() bool {
	b := make([]byte, 64<<10)
	return strings.Contains(string(b[:runtime.Stack(b, false)]), "supervisor.(*Steppers).run")
}

// A tick, and the actions its step carries out on the same goroutine,
// run on a stepper.
func TestTicksStepOnSteppers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		p := NewSteppers(ctx, 1)
		var observed, onTimer atomic.Int32
		s := hooked(t, "a", p, func() {
			observed.Add(1)
			if !onStepper() {
				onTimer.Add(1)
			}
		})
		s.Start(ctx)
		synctest.Wait()
		if observed.Load() == 0 {
			t.Fatal("the first step observed nothing")
		}
		if n := onTimer.Load(); n != 0 {
			t.Errorf("%d of %d observations ran off the steppers with a stepper idle", n, observed.Load())
		}
	})
}

// A lease whose step hangs on its store holds a stepper, and never
// delays another lease's tick: with every stepper busy, the tick steps
// on its timer's goroutine.
func TestBusySteppersDelayNoTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		p := NewSteppers(ctx, 1)
		gate, entered := make(chan struct{}), make(chan struct{})
		var once atomic.Bool
		hung := hooked(t, "hung", p, func() {
			if once.CompareAndSwap(false, true) {
				close(entered)
				<-gate
			}
		})
		var other atomic.Int32
		free := hooked(t, "free", p, func() { other.Add(1) })
		hung.Start(ctx)
		<-entered // the only stepper hangs in hung's observation
		free.Start(ctx)
		synctest.Wait()
		if other.Load() == 0 {
			t.Error("a lease's first tick waited for another lease's hung step")
		}
		close(gate)
	})
}

// A tick that finds every stepper busy gets a new one, up to the bound;
// the steppers end with their context.
func TestSteppersGrowToTheBoundAndEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		p := NewSteppers(ctx, 2)
		gate, entered := make(chan struct{}), make(chan struct{})
		var once atomic.Bool
		hung := hooked(t, "hung", p, func() {
			if once.CompareAndSwap(false, true) {
				close(entered)
				<-gate
			}
		})
		var stepped, offStepper atomic.Int32
		free := hooked(t, "free", p, func() {
			stepped.Add(1)
			if !onStepper() {
				offStepper.Add(1)
			}
		})
		hung.Start(ctx)
		<-entered
		free.Start(ctx)
		synctest.Wait()
		if stepped.Load() == 0 || offStepper.Load() != 0 {
			t.Errorf("with one stepper hung and a second allowed, %d of %d observations ran off the steppers", offStepper.Load(), stepped.Load())
		}
		if n := p.Len(); n != 2 {
			t.Errorf("%d steppers, want 2", n)
		}
		close(gate)
		cancel()
		synctest.Wait()
		if n := p.Len(); n != 0 {
			t.Errorf("%d steppers left after their context ended", n)
		}
	})
}
