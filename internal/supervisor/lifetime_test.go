package supervisor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
)

type lifetimeKey struct{}

// TestLifetimeEndsWhatDerivesFromIt: the context a launched supervisor's
// actions run on has its parent's values and deadline; a child derived
// from it (as every request to Redis derives one with a timeout) and a
// context.AfterFunc on it end when the supervisor is ended, with
// context.Canceled as error and cause; a child derived after the end is
// done at once; a child that ended first leaves nothing registered, and
// an AfterFunc stopped before the end never runs.
func TestLifetimeEndsWhatDerivesFromIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		deadline := time.Now().Add(time.Hour)
		parent, cancel := context.WithDeadline(context.WithValue(t.Context(), lifetimeKey{}, "v"), deadline)
		defer cancel()
		s := demoSupervisor(t, []string{"demo.service"}, &fakeStore{t: t, noRelease: true}, &fakeUnits{}, logging.Text(io.Discard, slog.LevelDebug))
		end := s.Launch(parent)
		ctx := s.ctx
		if ctx.Value(lifetimeKey{}) != "v" {
			t.Fatal("the actions' context lost its parent's values")
		}
		if d, ok := ctx.Deadline(); !ok || !d.Equal(deadline) {
			t.Fatalf("the actions' context has deadline %v, %t; want its parent's, %v", d, ok, deadline)
		}
		short, cancelShort := context.WithTimeout(ctx, time.Second)
		<-short.Done() // ends by its own timeout first
		cancelShort()
		s.life.mu.Lock()
		left := s.life.hooks
		s.life.mu.Unlock()
		if left != nil {
			t.Fatalf("a child that ended first left %d hooks registered (and their list)", len(left))
		}
		child, cancelChild := context.WithTimeout(ctx, time.Minute)
		defer cancelChild()
		ran := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ran) })
		stopped := false
		stop := context.AfterFunc(ctx, func() { stopped = true })
		if !stop() {
			t.Fatal("an AfterFunc stopped before the end reports it had run")
		}
		if ctx.Err() != nil || child.Err() != nil {
			t.Fatalf("before the end: ctx %v, child %v", ctx.Err(), child.Err())
		}
		end()
		if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), context.Canceled) {
			t.Fatalf("ended: ctx %v, cause %v; want context.Canceled", ctx.Err(), context.Cause(ctx))
		}
		if !errors.Is(child.Err(), context.Canceled) {
			t.Fatalf("ended: the child derived before has %v, want context.Canceled at once", child.Err())
		}
		<-ran
		late, cancelLate := context.WithTimeout(ctx, time.Minute)
		defer cancelLate()
		<-late.Done()
		synctest.Wait()
		if stopped {
			t.Fatal("an AfterFunc stopped before the end ran")
		}
	})
}

// TestLifetimeErrIsItsParents: a supervisor started on a context ends
// with it, and its actions' context says why the parent ended.
func TestLifetimeErrIsItsParents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		s := demoSupervisor(t, []string{"demo.service"}, &fakeStore{t: t, noRelease: true}, &fakeUnits{}, logging.Text(io.Discard, slog.LevelDebug))
		s.Start(parent)
		<-s.Done()
		if !errors.Is(s.ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("the parent's deadline passed: the actions' context has %v, want context.DeadlineExceeded", s.ctx.Err())
		}
	})
}
