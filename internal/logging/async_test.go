package logging

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// gate holds every write until opened, like a journald that stopped
// reading; entered is closed when the first write began.
type gate struct {
	slog.Handler
	open    chan struct{}
	entered chan struct{}
	once    *sync.Once
}

func (g gate) Handle(ctx context.Context, r slog.Record) error {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return g.Handler.Handle(ctx, r)
}

func (g gate) WithAttrs(as []slog.Attr) slog.Handler {
	g.Handler = g.Handler.WithAttrs(as)
	return g
}

// TestAsyncNeverBlocksAndReportsDrops: with the journal blocked, logging
// returns at once; what does not fit the queue is dropped and counted;
// once the journal reads again the queue is written in order and one
// entry reports the drops.
func TestAsyncNeverBlocksAndReportsDrops(t *testing.T) {
	var buf bytes.Buffer
	g := gate{Handler: slog.NewTextHandler(&buf, nil), open: make(chan struct{}), entered: make(chan struct{}), once: &sync.Once{}}
	a := NewAsync(g, 3)
	log := slog.New(a).With(Lease, "db")
	log.Info("entry", "n", 0)
	<-g.entered // the writer is stuck in the journal with entry 0
	for i := 1; i < 10; i++ {
		log.Info("entry", "n", i) // returns at once
	}
	// The queue holds three more; six were dropped.
	d := a.Dropped()
	if d != 6 {
		t.Fatalf("%d dropped, want 6", d)
	}
	close(g.open)
	if !a.Close(10 * time.Second) {
		t.Fatal("the queue was not written once the gate opened")
	}
	out := buf.String()
	var entries, reports []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(l, "UNITLEASE_EVENT="+DropEvent) {
			reports = append(reports, l)
		} else {
			entries = append(entries, l)
		}
	}
	if len(reports) != 1 || !strings.Contains(reports[0], fmt.Sprintf("UNITLEASE_DROPPED=%d", d)) {
		t.Fatalf("want one entry that reports %d dropped:\n%s", d, out)
	}
	if len(entries) != 10-d {
		t.Fatalf("%d entries written, want %d:\n%s", len(entries), 10-d, out)
	}
	for i, l := range entries {
		if !strings.Contains(l, "UNITLEASE_LEASE=db") || !strings.Contains(l, fmt.Sprintf(" n=%d", i)) {
			t.Fatalf("entry %d out of order or without its attributes: %s", i, l)
		}
	}
}

// TestAsyncAfterCloseDrops: an entry after Close is dropped, never
// written to a handler that may be gone, and Close without entries
// returns at once.
func TestAsyncAfterCloseDrops(t *testing.T) {
	var buf bytes.Buffer
	a := NewAsync(slog.NewTextHandler(&buf, nil), 10)
	if !a.Close(time.Second) {
		t.Fatal("Close of an empty queue did not return")
	}
	slog.New(a).Info("late")
	if a.Dropped() != 1 || buf.Len() != 0 {
		t.Fatalf("after Close: %d dropped, written %q", a.Dropped(), buf.String())
	}
}
