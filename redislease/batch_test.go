package redislease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// TestBatchSharesOnePipeline queues renewals of many leases, a read and a
// request whose caller gave up, then lets the batcher take one batch: one
// pipeline carries them all, and each gets its own answer.
func TestBatchSharesOnePipeline(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newStore(t, srv, "node-a")
	const n = 50
	leases := make([]policy.Record, n)
	name := func(i int) string { return fmt.Sprintf("l%02d", i) }
	for i := range leases {
		leases[i] = mustAcquire(t, s, name(i))
	}
	if err := renewScript.Load(bg, s.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	// A batcher of our own, whose loop is not running: the test takes the
	// batch itself.
	b := &batcher{rdb: s.rdb, replyMax: time.Second, calls: make(chan *call, maxBatch), stop: make(chan struct{})}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	var calls []*call
	for i, r := range leases {
		v := r.Version
		if i == 7 {
			v-- // a stale version: this one alone is refused
		}
		c := &call{ctx: ctx, done: make(chan struct{}), queue: func(p redis.Pipeliner) redis.Cmder {
			return renewScript.EvalSha(ctx, p, []string{s.Key(name(i))}, r.Holder, r.Token, v, s.TTL().Milliseconds(), s.leaseSpan.Milliseconds(), "", StateHeld)
		}}
		calls = append(calls, c)
		b.calls <- c
	}
	gone, give := context.WithCancel(bg)
	give()
	b.calls <- &call{ctx: gone, done: make(chan struct{}), queue: func(p redis.Pipeliner) redis.Cmder {
		t.Error("a call whose caller gave up was sent")
		return p.Ping(bg)
	}}
	get := &call{ctx: ctx, done: make(chan struct{}), queue: func(p redis.Pipeliner) redis.Cmder { return p.Get(ctx, s.Key("l00")) }}
	b.calls <- get

	batch := b.collect(nil)
	if len(batch) != n+2 {
		t.Fatalf("collected %d calls, want %d", len(batch), n+2)
	}
	b.flush(batch)
	if got := b.flushes.Load(); got != 1 {
		t.Fatalf("%d pipelines, want 1", got)
	}
	for i, c := range calls {
		<-c.done
		reply, err := c.cmd.(*redis.Cmd).Slice()
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		want := "ok"
		if i == 7 {
			want = "lost"
		}
		if reply[0] != want {
			t.Errorf("lease %d: reply %v, want %s", i, reply[0], want)
		}
	}
	<-get.done
	raw, err := get.cmd.(*redis.StringCmd).Result()
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := Decode("l00", raw); err != nil || rec.Version != leases[0].Version+1 {
		t.Fatalf("read %q (%v), want l00 renewed in the same pipeline", raw, err)
	}
	// The scripts write records as Encode does: the decoder's fast path.
	if _, ok := decodeCanonical(raw); !ok {
		t.Errorf("the renew script wrote %q, not as Encode writes it", raw)
	}
}

// TestScriptFlushedIsSentAgain: after SCRIPT FLUSH a pipelined EVALSHA
// gets NOSCRIPT and did not run; the store sends the script again.
func TestScriptFlushedIsSentAgain(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newStore(t, srv, "node-a")
	l := mustAcquire(t, s, "vpn")
	srv.Command("SCRIPT", "FLUSH")
	next, err := s.Renew(bg, "vpn", l)
	if err != nil {
		t.Fatalf("renew after SCRIPT FLUSH: %v", err)
	}
	if next.Version != l.Version+1 {
		t.Fatalf("version %d, want %d: renewed exactly once", next.Version, l.Version+1)
	}
}

// TestBatchAnswersAfterClose: a request after Close fails at once.
func TestBatchAnswersAfterClose(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newStore(t, srv, "node-a")
	s.batch.close()
	_, err := s.Observe(bg, "vpn")
	if !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("observe after close: %v", err)
	}
}
