package unitctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// transientErrors are D-Bus errors that say nothing about the unit, only
// that systemd did not answer this time: it is re-executing, reloading or
// briefly off the bus (Pacemaker PR #3880).
var transientErrors = []string{
	"org.freedesktop.DBus.Error.NoReply",
	"org.freedesktop.DBus.Error.Disconnected",
	"org.freedesktop.DBus.Error.ServiceUnknown",
	"org.freedesktop.DBus.Error.NameHasNoOwner",
	"org.freedesktop.DBus.Error.Timeout",
	"org.freedesktop.DBus.Error.TimedOut",
	"org.freedesktop.DBus.Error.Spawn.ChildExited",
	"org.freedesktop.DBus.Error.LimitsExceeded",
}

// transient reports whether err is a failure of the connection or of
// systemd's presence on the bus rather than an answer.
func transient(err error) bool {
	var derr dbus.Error
	if errors.As(err, &derr) {
		return slices.Contains(transientErrors, derr.Name)
	}
	var pderr *dbus.Error
	if errors.As(err, &pderr) {
		return slices.Contains(transientErrors, pderr.Name)
	}
	return errors.Is(err, dbus.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// with runs op on the current connection. A transient failure, or any
// failure on a connection that has since broken, is retried with a
// bounded backoff on a new connection until ctx ends; op must therefore be
// safe to repeat. Any other error is op's answer and is returned.
func (s *Systemd) with(ctx context.Context, op func(*sd.Conn) error) error {
	var b backoff
	for {
		l, err := s.connection(ctx)
		if errors.Is(err, ErrClosed) {
			return err
		}
		if err == nil {
			err = op(l.sd)
			if err == nil || ctx.Err() == nil && !transient(err) && l.connected() {
				return err
			}
			s.forget(l)
		}
		if ctx.Err() != nil || !b.wait(ctx, s.opts.Logf, err) {
			return unanswered(ctx, err)
		}
	}
}

// unanswered is the error of a call that ctx ended while it was retried.
func unanswered(ctx context.Context, last error) error {
	if last == nil || errors.Is(last, ctx.Err()) {
		return fmt.Errorf("unitctl: systemd did not answer: %w", ctx.Err())
	}
	return fmt.Errorf("unitctl: systemd did not answer: %w (last error: %v)", ctx.Err(), last)
}

// backoff waits 10ms, doubling up to 500ms, between retries.
type backoff struct{ d time.Duration }

func (b *backoff) wait(ctx context.Context, logf func(string, ...any), cause error) bool {
	b.d = min(max(2*b.d, 10*time.Millisecond), 500*time.Millisecond)
	logf("unitctl: retrying in %v after: %v", b.d, cause)
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// aside runs a call that takes no context (go-systemd has a few) and
// stops waiting for it when ctx ends; the call then finishes on its own
// and its result is dropped.
func aside[T any](ctx context.Context, call func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
