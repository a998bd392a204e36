package redislease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Definitive answers, and the lack of one.
var (
	// ErrLost: someone else holds the lease, or it was released or renewed
	// past the caller's version. Definitive: stop at once (DESIGN.md rule 2).
	ErrLost = errors.New("redislease: lease held by another")
	// ErrMissing: the key does not exist (expired, deleted, or Redis lost
	// its data). A state like any other (rule 4).
	ErrMissing = errors.New("redislease: lease key missing")
	// ErrConflict: the key no longer holds what the caller observed.
	ErrConflict = errors.New("redislease: lease changed since observed")
	// ErrUnknown: no answer within reply_max, or the connection failed; a
	// write may or may not have happened.
	ErrUnknown = errors.New("redislease: outcome unknown")
)

// LostError says who holds the lease now.
type LostError struct {
	Key     string
	Current Record
}

func (e *LostError) Error() string {
	return fmt.Sprintf("redislease: key %s is %s by %s at version %d", e.Key, e.Current.State, e.Current.Holder, e.Current.Version)
}

func (e *LostError) Unwrap() error { return ErrLost }

// ConflictError carries what the key holds now.
type ConflictError struct {
	Key     string
	Current Observation
}

func (e *ConflictError) Error() string {
	if e.Current.Absent {
		return fmt.Sprintf("redislease: key %s changed since observed: now missing", e.Key)
	}
	return fmt.Sprintf("redislease: key %s changed since observed: now version %d held by %s", e.Key, e.Current.Record.Version, e.Current.Record.Holder)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// Observation is what a GET of a lease key returned: the exact bytes, or
// absence. Two observations are the same state iff Same says so.
type Observation struct {
	Name   string
	Absent bool
	Raw    []byte
	// Record is Raw decoded; zero when absent or garbage.
	Record Record
}

// Same reports whether two observations saw the same value, byte for byte.
func (o Observation) Same(p Observation) bool {
	return o.Absent == p.Absent && string(o.Raw) == string(p.Raw)
}

// Lease is a lease this node holds: the record it last wrote.
type Lease struct {
	Name   string
	Record Record
	Raw    []byte // the record's bytes as Redis returned them; nil if not read back
}

// Store is the lease store on one Redis. It is safe for concurrent use.
type Store struct {
	rdb       *redis.Client
	batch     *batcher
	prefix    string
	node      string
	replyMax  time.Duration
	leaseSpan time.Duration

	mu    sync.Mutex
	floor map[string]uint64 // highest version seen per lease
}

// New connects lazily: the first request dials.
func New(cfg Config) (*Store, error) {
	opt, err := cfg.options()
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	return &Store{
		rdb:       rdb,
		batch:     newBatcher(rdb, cfg.ReplyMax),
		prefix:    cfg.KeyPrefix,
		node:      cfg.Node,
		replyMax:  cfg.ReplyMax,
		leaseSpan: cfg.LeaseSpan,
		floor:     map[string]uint64{},
	}, nil
}

// Close closes every connection.
func (s *Store) Close() error {
	s.batch.close()
	return s.rdb.Close()
}

// Key is the Redis key of a lease.
func (s *Store) Key(name string) string { return s.prefix + "lease:" + name }

// Channel is where releases and acquisitions of a lease are published.
func (s *Store) Channel(name string) string { return s.prefix + "events:" + name }

// TTL is what every write sets on a lease key. It decides nothing: a key
// that expires is observed as missing and must stay missing for the lease
// span before anyone acquires (rule 4), exactly like a Redis data loss. A
// holder rewrites the key every retry period, so a live lease never comes
// near it; it only lets Redis drop the records of leases nobody uses any
// more. A day, or ten lease spans if that is longer.
func (s *Store) TTL() time.Duration { return max(24*time.Hour, 10*s.leaseSpan) }

// bounded ends ctx within reply_max; a ctx that already does is returned
// as it is (Renew bounds its two tries once, and each goes through run).
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.replyMax {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.replyMax)
}

// Observe reads a lease key. A value that is not a record, or whose version
// is below one this store has seen, is returned with a *GarbageError: the
// caller must not acquire over it.
func (s *Store) Observe(ctx context.Context, name string) (Observation, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	cmd, err := s.batch.do(ctx, func(p redis.Pipeliner) redis.Cmder { return p.Get(ctx, s.Key(name)) })
	var raw []byte
	if err == nil {
		raw, err = cmd.(*redis.StringCmd).Bytes()
	}
	if errors.Is(err, redis.Nil) {
		return Observation{Name: name, Absent: true}, nil
	}
	if err != nil {
		return Observation{}, fmt.Errorf("redislease: observe %s: %w", s.Key(name), err)
	}
	return s.observed(name, raw)
}

// observed decodes a value read from the lease's key and checks it against
// the versions seen before.
func (s *Store) observed(name string, raw []byte) (Observation, error) {
	o := Observation{Name: name, Raw: raw}
	rec, err := Decode(s.Key(name), raw)
	if err != nil {
		return o, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if floor := s.floor[name]; rec.Version < floor {
		return o, &GarbageError{Key: s.Key(name), Value: raw,
			Reason: fmt.Sprintf("version %d went backwards (this node has seen %d)", rec.Version, floor)}
	}
	s.floor[name] = rec.Version
	o.Record = rec
	return o, nil
}

func (s *Store) floorOf(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.floor[name]
}

// Acquire compare-and-sets the key from exactly what seen observed (or from
// absence) to a new record held by this node with a fresh token. It never
// writes over garbage. On ErrUnknown the caller must observe again and must
// not act as holder.
func (s *Store) Acquire(ctx context.Context, seen Observation) (Lease, error) {
	name := seen.Name
	if !seen.Absent {
		if _, err := Decode(s.Key(name), seen.Raw); err != nil {
			return Lease{}, err
		}
	}
	token, err := newToken()
	if err != nil {
		return Lease{}, err
	}
	reply, err := s.run(ctx, acquireScript, name,
		string(seen.Raw), flag(seen.Absent), s.node, token, s.floorOf(name),
		s.TTL().Milliseconds(), s.Channel(name), s.leaseSpan.Milliseconds())
	if err != nil {
		return Lease{}, err
	}
	return s.lease(name, reply)
}

// Renew extends a lease this node holds. It returns the lease at its new
// version, or a *LostError (definitive), ErrMissing, a *GarbageError, or
// ErrUnknown.
func (s *Store) Renew(ctx context.Context, l Lease) (Lease, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	next, err := s.renew(ctx, l)
	var lost *LostError
	if errors.As(err, &lost) && s.ours(l, lost.Current) {
		// An earlier renewal whose reply never came did commit: the key
		// is still ours, one or more versions on. Renew from there.
		next, err = s.renew(ctx, Lease{Name: l.Name, Record: lost.Current})
	}
	return next, err
}

func (s *Store) renew(ctx context.Context, l Lease) (Lease, error) {
	r := l.Record
	reply, err := s.run(ctx, renewScript, l.Name,
		r.Holder, r.Token, r.Version, s.TTL().Milliseconds(), s.leaseSpan.Milliseconds())
	if err != nil {
		return Lease{}, err
	}
	return s.lease(l.Name, reply)
}

// ours reports whether cur is a later version of our own held record.
func (s *Store) ours(l Lease, cur Record) bool {
	return cur.Held() && cur.Holder == l.Record.Holder && cur.Token == l.Record.Token && cur.Version > l.Record.Version
}

// Release writes a released record over this node's held one and publishes
// it. Call it only once the unit is confirmed inactive (rule 3).
func (s *Store) Release(ctx context.Context, l Lease) (Record, error) {
	r := l.Record
	reply, err := s.run(ctx, releaseScript, l.Name,
		r.Holder, r.Token, r.Version, s.TTL().Milliseconds(), s.leaseSpan.Milliseconds(), s.Channel(l.Name))
	if err != nil {
		return Record{}, err
	}
	next, err := s.lease(l.Name, reply)
	return next.Record, err
}

// Overwrite replaces exactly what seen observed, garbage included, with a
// released record held by this node. It is for an operator who has looked
// at the value; the daemon never calls it.
func (s *Store) Overwrite(ctx context.Context, seen Observation) (Record, error) {
	token, err := newToken()
	if err != nil {
		return Record{}, err
	}
	version := s.floorOf(seen.Name) + 1
	if rec, err := Decode(s.Key(seen.Name), seen.Raw); err == nil {
		version = max(version, rec.Version+1)
	}
	reply, err := s.run(ctx, overwriteScript, seen.Name,
		string(seen.Raw), flag(seen.Absent), s.node, token, version,
		s.TTL().Milliseconds(), s.Channel(seen.Name))
	if err != nil {
		return Record{}, err
	}
	s.mu.Lock()
	delete(s.floor, seen.Name) // the operator's word resets what this node knew
	s.mu.Unlock()
	l, err := s.lease(seen.Name, reply)
	return l.Record, err
}

// run executes a script on a lease key within reply_max, in a pipeline
// with whatever other requests are ready. A script Redis does not have
// (after a restart or SCRIPT FLUSH) did not run, so it is sent again on
// its own, which loads it.
func (s *Store) run(ctx context.Context, script *redis.Script, name string, args ...any) ([]any, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	keys := []string{s.Key(name)}
	cmd, err := s.batch.do(ctx, func(p redis.Pipeliner) redis.Cmder { return script.EvalSha(ctx, p, keys, args...) })
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd, err = script.Run(ctx, s.rdb, keys, args...), nil
	}
	var v []any
	if err == nil {
		v, err = cmd.(*redis.Cmd).Slice()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnknown, s.Key(name), err)
	}
	return v, nil
}

// lease interprets a script's reply.
func (s *Store) lease(name string, reply []any) (Lease, error) {
	key := s.Key(name)
	status, _ := reply[0].(string)
	var raw []byte
	if len(reply) > 1 {
		str, _ := reply[1].(string)
		raw = []byte(str)
	}
	switch status {
	case "ok":
		o, err := s.observed(name, raw)
		return Lease{Name: name, Record: o.Record, Raw: raw}, err
	case "missing":
		return Lease{}, fmt.Errorf("%w: %s", ErrMissing, key)
	case "garbage":
		_, err := Decode(key, raw)
		if err == nil {
			err = &GarbageError{Key: key, Value: raw, Reason: "the script could not read it"}
		}
		return Lease{}, err
	case "conflict":
		cur := Observation{Name: name, Absent: len(reply) == 1}
		if !cur.Absent {
			cur, _ = s.observed(name, raw)
		}
		return Lease{}, &ConflictError{Key: key, Current: cur}
	case "lost":
		o, err := s.observed(name, raw)
		if err != nil {
			return Lease{}, err
		}
		return Lease{}, &LostError{Key: key, Current: o.Record}
	}
	return Lease{}, fmt.Errorf("%w: %s: unexpected script reply %q", ErrUnknown, key, reply)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func newToken() (string, error) {
	var b [tokenLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redislease: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Ping checks that Redis answers within reply_max.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	return s.rdb.Ping(ctx).Err()
}
