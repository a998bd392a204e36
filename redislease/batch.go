package redislease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxBatch bounds one pipeline.
const maxBatch = 256

// A batcher sends every request queued while Redis was busy as one
// pipeline: one write, one read and one wake-up for many leases. A daemon's
// leases renew at the same few instants (policy.Config.RenewGrid), so at
// scale most renewals share a round trip; a lone request goes out at once,
// with no added wait. Each request keeps its own answer: a pipeline is
// not a transaction, and a script that failed fails only its own lease.
type batcher struct {
	rdb      *redis.Client
	replyMax time.Duration
	calls    chan *call
	stop     chan struct{}
	closing  sync.Once
	done     sync.WaitGroup
	flushes  atomic.Int64 // pipelines sent, for tests and benchmarks
	// server is the last identity read, kept by the loop's flushes: an
	// identity equal to it is handed out as this very string, so that
	// the records of thousands of leases, each kept until the next
	// answer, share one copy instead of one each (a run id and a
	// replication id: 81 bytes).
	server string
}

// call is one request in a batch. queue adds its command to the pipeline;
// cmd holds it, with its reply or error, once done is closed.
type call struct {
	ctx    context.Context
	queue  func(redis.Pipeliner) redis.Cmder
	cmd    redis.Cmder
	server string // the identity of the server that answered the pipeline
	idErr  error  // why the identity could not be read, if it could not
	err    error  // why the pipeline got no answer at all (AUTH refused, ...)
	done   chan struct{}
}

func newBatcher(rdb *redis.Client, replyMax time.Duration) *batcher {
	b := &batcher{rdb: rdb, replyMax: replyMax, calls: make(chan *call, maxBatch), stop: make(chan struct{})}
	b.done.Add(1)
	go b.loop()
	return b
}

func (b *batcher) close() {
	b.closing.Do(func() { close(b.stop) })
	b.done.Wait()
}

// do queues a request and waits for its reply, or for ctx's end: then the
// request may or may not have been sent, and cmd is nil. server is the
// identity of the server that answered (identityScript), read in the same
// pipeline on the same connection. An answer without it is an error (the
// request may have been carried out): a record from an unknown server
// could be an older state's.
func (b *batcher) do(ctx context.Context, queue func(redis.Pipeliner) redis.Cmder) (cmd redis.Cmder, server string, err error) {
	c := &call{ctx: ctx, queue: queue, done: make(chan struct{})}
	select {
	case <-b.stop:
		return nil, "", redis.ErrClosed
	default:
	}
	select {
	case b.calls <- c:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	case <-b.stop:
		return nil, "", redis.ErrClosed
	}
	select {
	case <-c.done:
		if c.err != nil {
			return c.cmd, "", c.err
		}
		if err := c.cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return c.cmd, c.server, err
		}
		if c.idErr != nil { // an answer, a missing key (redis.Nil) included
			return c.cmd, "", fmt.Errorf("%w (the Redis user needs EVAL and INFO): %w", ErrNoIdentity, c.idErr)
		}
		return c.cmd, c.server, c.cmd.Err()
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

func (b *batcher) loop() {
	defer b.done.Done()
	batch := make([]*call, 0, maxBatch)
	for {
		select {
		case c := <-b.calls:
			batch = b.collect(append(batch[:0], c))
			b.flush(batch)
			clear(batch)
		case <-b.stop:
			return
		}
	}
}

// collect adds to batch every call already queued, up to maxBatch.
func (b *batcher) collect(batch []*call) []*call {
	for len(batch) < maxBatch {
		select {
		case c := <-b.calls:
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// flush sends a batch within the earliest deadline among its calls (every
// caller bounds its request by reply_max). A call whose caller gave up is
// left out: it was never sent.
func (b *batcher) flush(batch []*call) {
	deadline := time.Now().Add(b.replyMax)
	pipe := b.rdb.Pipeline()
	// First, who answers: every request of the pipeline goes over the
	// same connection to the same server, after this read.
	id := identityScript.Eval(context.Background(), pipe, nil)
	sent := batch[:0] // filtered in place: the loop clears batch afterwards
	for _, c := range batch {
		if c.ctx.Err() != nil {
			continue // its caller returned already and reads nothing
		}
		if d, ok := c.ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		c.cmd = c.queue(pipe)
		sent = append(sent, c)
	}
	var server string
	var idErr, noAnswer error
	if len(sent) > 0 {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, err := pipe.Exec(ctx) // each command carries its own error...
		cancel()
		if err != nil && id.Err() == nil && id.Val() == nil {
			// ...unless the connection failed before any was sent (the
			// server refused AUTH): then none does, and this is why.
			noAnswer = err
		}
		b.flushes.Add(1)
		server, idErr = id.Text()
		if idErr == nil && !validIdentity(server) {
			idErr = fmt.Errorf("unexpected reply %q", server)
		}
		if server == b.server {
			server = b.server
		} else if idErr == nil {
			b.server = server
		}
	}
	for _, c := range sent {
		c.server, c.idErr, c.err = server, idErr, noAnswer
		close(c.done)
	}
}

// ErrNoIdentity: an answer came without the identity of the server that
// gave it (a Redis user that may not run INFO): no record of it is
// trusted, and every call fails.
var ErrNoIdentity = errors.New("redislease: cannot tell which Redis server answered")

// validIdentity reports whether id is what identityScript returns: two
// non-empty hex ids.
func validIdentity(id string) bool {
	run, repl, ok := strings.Cut(id, ":")
	hex := func(s string) bool {
		return s != "" && strings.Trim(s, "0123456789abcdef") == ""
	}
	return ok && hex(run) && hex(repl)
}

// identityScript returns the identity of the server that runs it: its run
// id (new at every start of redis-server) and its replication id (new
// when it is promoted, or takes a master's data set over), as
// "RUNID:REPLID". A server whose identity changed may answer from an
// older state than the one a node read before (rules 7, 8).
var identityScript = redis.NewScript(`
local s = redis.call('INFO', 'server')
local r = redis.call('INFO', 'replication')
return (string.match(s, 'run_id:(%x+)') or '') .. ':' .. (string.match(r, 'master_replid:(%x+)') or '')
`)
