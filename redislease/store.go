package redislease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unitlease/unitlease/policy"
)

// Definitive answers, and the lack of one.
var (
	// ErrLost: someone else holds the lease, or it was released or renewed
	// past the caller's version. Definitive: stop at once (rule 2).
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

// LostError says who holds the lease now: Current, as Redis returned it.
type LostError struct {
	Key     string
	Current policy.Record
}

func (e *LostError) Error() string {
	if c := e.Current; c.Other != nil {
		return fmt.Sprintf("redislease: unit %s is held under lease %s by %s at version %d", c.Other.Unit, c.Other.Lease, c.Holder, c.Version)
	}
	return fmt.Sprintf("redislease: key %s is %s by %s at version %d", e.Key, StateOf(e.Current), e.Current.Holder, e.Current.Version)
}

func (e *LostError) Unwrap() error { return ErrLost }

// ConflictError carries what the key holds now (not Present: missing).
type ConflictError struct {
	Key     string
	Current policy.Record
}

func (e *ConflictError) Error() string {
	if !e.Current.Present {
		return fmt.Sprintf("redislease: key %s changed since observed: now missing", e.Key)
	}
	return fmt.Sprintf("redislease: key %s changed since observed: now version %d held by %s", e.Key, e.Current.Version, e.Current.Holder)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

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
	// presence is this node's announcements (SetAnnouncements), opened
	// at the first and closed with the store.
	presence    *Presence
	endPresence context.CancelFunc

	sentinel *redis.FailoverOptions // nil for one Redis
}

// New connects lazily: the first request dials.
func New(cfg Config) (*Store, error) {
	opt, err := cfg.options()
	if err != nil {
		return nil, err
	}
	var rdb *redis.Client
	var fo *redis.FailoverOptions
	if cfg.Sentinel() {
		if fo, err = cfg.failover(opt); err != nil {
			return nil, err
		}
		rdb = redis.NewFailoverClient(fo)
	} else {
		rdb = redis.NewClient(opt)
	}
	return &Store{
		rdb:       rdb,
		batch:     newBatcher(rdb, cfg.ReplyMax),
		prefix:    cfg.KeyPrefix,
		node:      cfg.Node,
		replyMax:  cfg.ReplyMax,
		leaseSpan: cfg.LeaseSpan,
		floor:     map[string]uint64{},
		sentinel:  fo,
	}, nil
}

// Close closes every connection.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.endPresence != nil {
		s.endPresence()
	}
	s.mu.Unlock()
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

// Identifies marks a store whose every record names the server that
// answered (policy.Record.Server; policy.Config.Identified).
func (s *Store) Identifies() {}

// Observe reads a lease key: policy.Absent when it is missing, else the
// record decoded once, with its exact bytes. A value that is not a record
// comes with a *GarbageError (and as a present record with Raw alone): the
// caller must not acquire over it. A version below one this store has seen
// is a value like any other (the store rolled back). It is ObserveUnits without units: the lease key
// alone.
func (s *Store) Observe(ctx context.Context, name string) (policy.Record, error) {
	return s.ObserveUnits(ctx, name, nil)
}

// ObserveUnits is Observe for a lease with units: it also reads their unit
// keys, in the same command. While none names another lease's live record
// it returns the lease's own record, as Observe does. Otherwise it returns
// one record standing for every value read, marked with the first other
// lease and its unit (policy.Record.Other): the standby ages it, and
// any change to any of the values (every renewal of the other lease)
// changes it. A unit key that holds anything but a unit record comes with
// a *GarbageError naming that key. Pass the same units, in the same order,
// to every call for the lease.
func (s *Store) ObserveUnits(ctx context.Context, name string, units []string) (policy.Record, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if len(units) > 0 {
		return s.observeUnits(ctx, name, units)
	}
	vals, server, err := s.read(ctx, []string{s.Key(name)})
	if err != nil {
		return policy.Record{}, fmt.Errorf("redislease: observe %s: %w", s.Key(name), err)
	}
	switch v := vals[0].(type) {
	case nil:
		missing := policy.Absent
		missing.Server = server
		return missing, nil
	case *Odd:
		return v.garbage(s.Key(name))
	}
	rec, err := s.observed(name, vals[0].(string))
	if err == nil {
		rec.Server = server
	}
	return rec, err
}

// read reads keys in one script on the batch's pipeline, as MGET would,
// but never more than MaxValue bytes of one: each value comes back as a
// string, nil when the key is missing, or an *Odd for a key that holds
// another type than a string or a longer string (a value of hundreds of
// megabytes would outlast every timeout, and hold the daemon's memory).
func (s *Store) read(ctx context.Context, keys []string) ([]any, string, error) {
	return s.readProbe(ctx, keys, false)
}

func (s *Store) readProbe(ctx context.Context, keys []string, probe bool) ([]any, string, error) {
	cmd, server, err := s.batch.do(ctx, func(p redis.Pipeliner) redis.Cmder {
		return readScript.Eval(ctx, p, keys, flag(probe))
	})
	var reply []any
	if err == nil {
		reply, err = cmd.(*redis.Cmd).Slice()
	}
	if err != nil {
		return nil, "", permission(err)
	}
	reply, err = readReply(keys, reply)
	return reply, server, err
}

// readReply checks readScript's reply for keys, and turns each odd value
// (a marker, which getv never returns for anything else) into an *Odd.
func readReply(keys []string, reply []any) ([]any, error) {
	if len(reply) != len(keys) {
		return nil, fmt.Errorf("read %d values for %d keys", len(reply), len(keys))
	}
	for i, v := range reply {
		switch v := v.(type) {
		case nil:
		case string:
			if rest, ok := strings.CutPrefix(v, oddPrefix); ok {
				odd, ok := parseOdd(rest)
				if !ok {
					return nil, fmt.Errorf("read %s: unexpected reply %q", keys[i], v)
				}
				reply[i] = odd
			}
		default:
			return nil, fmt.Errorf("read %s: unexpected reply %v", keys[i], v)
		}
	}
	return reply, nil
}

// readScript reads KEYS (a lease key, then its unit keys) with getv, as
// every script reads them: for each its value, nil (false) when it is
// missing, or an odd value's marker. ARGV[1] "1" probes the ACL (Ping).
var readScript = redis.NewScript(recordLua + `
if ARGV[1] == '1' then
  -- Ping's probe: every command an observation may need, on a key no
  -- lease has, so that a user who may not run one is told at once.
  redis.call('STRLEN', KEYS[1])
  redis.call('GETRANGE', KEYS[1], 0, 0)
  redis.call('TIME')
end
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = getv(k)
end
return out
`)

// MaxValue bounds what unitlease reads of one key: a record is a few
// hundred bytes. A longer value, or a key of another type than a string,
// is an Odd value: garbage, known by its type, length and first bytes.
const MaxValue = 64 << 10

// An Odd value is one no read brings back whole: a key of another type
// than a string (written by another client of the server), or a string
// longer than MaxValue.
type Odd struct {
	Type string // Redis's TYPE: string, list, hash, set, zset, stream
	Size int64  // a string's length
	Head string // a string's first 64 bytes
}

// oddPrefix begins every marker (Odd.marker, the scripts' getv).
const oddPrefix = "\x00odd:"

// parseOdd reads a marker without its prefix: TYPE:LENGTH:HEAD.
func parseOdd(m string) (*Odd, bool) {
	t, rest, ok1 := strings.Cut(m, ":")
	n, head, ok2 := strings.Cut(rest, ":")
	size, err := strconv.ParseInt(n, 10, 64)
	return &Odd{Type: t, Size: size, Head: head}, ok1 && ok2 && err == nil && t != ""
}

func (o *Odd) String() string {
	if o.Type != "string" {
		return "a Redis " + o.Type + ", not a string"
	}
	return fmt.Sprintf("%d bytes, more than any record (%d)", o.Size, MaxValue)
}

// marker is what stands for an odd value in a record's Raw: it changes
// when the type, length or first bytes do, so a standby ages it like any
// other value, and it is never a record.
func (o *Odd) marker() string {
	return fmt.Sprintf("%s%s:%d:%s", oddPrefix, o.Type, o.Size, o.Head)
}

// garbage is what Observe returns for an odd value at key.
func (o *Odd) garbage(key string) (policy.Record, error) {
	return policy.Record{Present: true, Raw: o.marker()}, &GarbageError{Key: key, Value: o.Head, Reason: o.String()}
}

// observed decodes a value read from the lease's key and raises the
// lease's version floor to it. A version below the floor (the store rolled
// back: a restart that lost writes, a restore, a failover to a replica
// that missed them) is a value like any other, which a standby ages
// (rule 8); the floor stays, so that an acquisition writes a
// version above every one this node has seen.
func (s *Store) observed(name, raw string) (policy.Record, error) {
	rec, err := Decode(s.Key(name), raw)
	if err != nil {
		return rec, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor[name] = max(s.floor[name], rec.Version)
	return rec, nil
}

func (s *Store) floorOf(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.floor[name]
}

// Acquire compare-and-sets the key from exactly the value seen (a record
// Observe returned, or policy.Absent) to a new record held by this node
// with a fresh token, and returns that record. It never writes over
// garbage: the script refuses a value it cannot read, and a seen value
// that Observe could not decode is refused here. On ErrUnknown the caller
// must observe again and must not act as holder. It is AcquireUnits
// without units.
func (s *Store) Acquire(ctx context.Context, name string, seen policy.Record) (policy.Record, error) {
	return s.AcquireUnits(ctx, name, nil, seen)
}

// AcquireUnits is Acquire for a lease with units, over what ObserveUnits
// returned for them: the unit keys must hold exactly what was seen too. A
// unit key that names another lease's live record the caller did not see
// and age, or whose record changed since, refuses the acquisition with a
// *ClaimedError naming the unit and that lease; on success every unit key
// names this lease.
func (s *Store) AcquireUnits(ctx context.Context, name string, units []string, seen policy.Record) (policy.Record, error) {
	if seen.Present && seen.Version == 0 {
		return policy.Record{}, &GarbageError{Key: s.Key(name), Value: seen.Raw, Reason: "not a record Observe returned"}
	}
	own, expected := seen, map[string]string(nil)
	if seen.Other != nil {
		var ok bool
		if own, expected, ok = parseComposite(seen.Raw); !ok {
			return policy.Record{}, &GarbageError{Key: s.Key(name), Value: seen.Raw, Reason: "not an observation ObserveUnits returned"}
		}
	}
	esc, err := s.leaseArg(name, units)
	if err != nil {
		return policy.Record{}, err
	}
	token, err := newToken()
	if err != nil {
		return policy.Record{}, err
	}
	args := []any{own.Raw, flag(!own.Present), s.node, token, s.floorOf(name),
		s.TTL().Milliseconds(), s.Channel(name), s.leaseSpan.Milliseconds(), esc}
	for _, u := range units {
		args = append(args, expected[u])
	}
	args = append(args, s.DisabledKey(name))
	reply, server, err := s.run(ctx, acquireScript, name, units, args...)
	if err != nil {
		return policy.Record{}, err
	}
	fresh := len(reply) == 3 && reply[0] == "ok" && reply[2] == "fresh"
	if fresh {
		reply = reply[:2]
	}
	rec, err := s.reply(name, server, reply, expected)
	rec.Fresh = fresh && err == nil
	return rec, err
}

// leaseArg is the lease's name as the scripts write it into unit keys;
// only a lease with units needs one.
func (s *Store) leaseArg(name string, units []string) (string, error) {
	if len(units) == 0 {
		return "", nil
	}
	return escapeLease(name)
}

// Renew extends the lease this node holds as held and returns the record
// at its new version, or a *LostError (definitive), ErrMissing, a
// *GarbageError, or ErrUnknown. A record that extends held (policy's
// Record.Extends: an earlier renewal whose reply was lost did commit) is
// still this node's: it renews from there. held.StopFailed is the state to
// write: stop_failed while this node cannot stop the lease's units, which
// no standby acquires over. It is RenewUnits without units.
func (s *Store) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	return s.RenewUnits(ctx, name, nil, held)
}

// RenewUnits is Renew for a lease with units: their unit keys get the new
// record too (written again where they went missing, or named another
// lease's released record). A unit key that names another lease's live
// record is a loss: a *LostError whose Current is that record, marked
// with its lease and unit, and nothing is written. A unit key that holds
// garbage is left as it is: the lease is renewed all the same, and the
// new record comes with a *GarbageError naming that key. A lease acquired
// with units is renewed with the same units, every time: a renewal
// without them leaves their keys unchanged, and another lease's standby
// would take them for a holder's that stopped.
func (s *Store) RenewUnits(ctx context.Context, name string, units []string, held policy.Record) (policy.Record, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	next, err := s.renew(ctx, name, units, held)
	var lost *LostError
	if errors.As(err, &lost) && lost.Current.Extends(held) {
		r := lost.Current
		r.StopFailed = held.StopFailed // the state to write
		next, err = s.renew(ctx, name, units, r)
	}
	return next, err
}

func (s *Store) renew(ctx context.Context, name string, units []string, r policy.Record) (policy.Record, error) {
	esc, err := s.leaseArg(name, units)
	if err != nil {
		return policy.Record{}, err
	}
	state := StateHeld
	if r.StopFailed {
		state = StateStopFailed
	}
	reply, server, err := s.run(ctx, renewScript, name, units,
		r.Holder, r.Token, r.Version, s.TTL().Milliseconds(), s.leaseSpan.Milliseconds(), esc, state)
	if err != nil {
		return policy.Record{}, err
	}
	rec, err := s.reply(name, server, reply, nil)
	if c, ok := errors.AsType[*ClaimedError](err); ok {
		return policy.Record{}, &LostError{Key: c.Key, Current: c.Current}
	}
	return rec, err
}

// Release writes a released record over this node's held one, publishes
// it and returns it. Call it only once the unit is confirmed inactive
// (rule 3). It is ReleaseUnits without units.
func (s *Store) Release(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	return s.ReleaseUnits(ctx, name, nil, held)
}

// ReleaseUnits is Release for a lease with units: the unit keys that name
// this lease (or went missing) get the released record; one that names
// another lease is left to it. A unit key that holds garbage is left as
// it is, and the released record comes with a *GarbageError naming it.
func (s *Store) ReleaseUnits(ctx context.Context, name string, units []string, held policy.Record) (policy.Record, error) {
	esc, err := s.leaseArg(name, units)
	if err != nil {
		return policy.Record{}, err
	}
	r := held
	if r.Next != "" {
		if err := ValidNode(r.Next); err != nil {
			return policy.Record{}, fmt.Errorf("redislease: release of %s to a node: %w", name, err)
		}
	}
	reply, server, err := s.run(ctx, releaseScript, name, units,
		r.Holder, r.Token, r.Version, s.TTL().Milliseconds(), s.leaseSpan.Milliseconds(), s.Channel(name), esc, r.Next)
	if err != nil {
		return policy.Record{}, err
	}
	return s.reply(name, server, reply, nil)
}

// Overwrite replaces exactly the value seen (as Observe returned it,
// garbage included, or policy.Absent) with a released record held by this
// node. It is for an operator who has looked at the value; the daemon
// never calls it.
func (s *Store) Overwrite(ctx context.Context, name string, seen policy.Record) (policy.Record, error) {
	token, err := newToken()
	if err != nil {
		return policy.Record{}, err
	}
	version := max(s.floorOf(name), seen.Version) + 1
	reply, server, err := s.run(ctx, overwriteScript, name, nil,
		seen.Raw, flag(!seen.Present), s.node, token, version,
		s.TTL().Milliseconds(), s.Channel(name))
	if err != nil {
		return policy.Record{}, err
	}
	s.mu.Lock()
	delete(s.floor, name) // the operator's word resets what this node knew
	s.mu.Unlock()
	return s.reply(name, server, reply, nil)
}

// OddValue reports the lease key's value when it is odd (nil
// otherwise, a missing key included): `reset` replaces such a value by its
// type, length and first bytes (OverwriteOdd), never reading it whole.
func (s *Store) OddValue(ctx context.Context, name string) (*Odd, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	vals, _, err := s.read(ctx, []string{s.Key(name)})
	if err != nil {
		return nil, fmt.Errorf("redislease: read %s: %w", s.Key(name), err)
	}
	odd, _ := vals[0].(*Odd)
	return odd, nil
}

// OverwriteOdd is Overwrite for a value OddValue reported: it replaces
// it if it still has that type, and for a string that length and first
// bytes.
func (s *Store) OverwriteOdd(ctx context.Context, name string, odd *Odd) (policy.Record, error) {
	token, err := newToken()
	if err != nil {
		return policy.Record{}, err
	}
	reply, server, err := s.run(ctx, overwriteOddScript, name, nil,
		fmt.Sprintf("%s:%d", odd.Type, odd.Size), odd.Head, s.node, token, s.floorOf(name)+1, s.TTL().Milliseconds(), s.Channel(name))
	if err != nil {
		return policy.Record{}, err
	}
	s.mu.Lock()
	delete(s.floor, name) // the operator's word resets what this node knew
	s.mu.Unlock()
	return s.reply(name, server, reply, nil)
}

// ErrNotStopFailed: Clear found the lease's record in another state than
// stop_failed.
var ErrNotStopFailed = errors.New("not stop_failed")

// Clear is the operator's word that the node named in the lease's
// stop_failed record was cleaned up by hand (its units' processes are
// gone): it replaces exactly the record it read with a released one in
// that node's name and token (as it would have released it), and every
// unit key that mirrors that record with
// the same, so that a standby acquires at once. It refuses a record in
// any other state (ErrNotStopFailed) or a missing one, and a record that
// changed since it read it (a *ConflictError). It returns the record it
// replaced, the released record and the units whose keys it cleared.
func (s *Store) Clear(ctx context.Context, name string) (was, now policy.Record, units []string, err error) {
	esc, err := escapeLease(name)
	if err != nil {
		return was, now, nil, err
	}
	was, err = s.Observe(ctx, name)
	switch {
	case err != nil:
		return was, now, nil, err
	case !was.Present:
		return was, now, nil, fmt.Errorf("lease %s: the key %s does not exist", name, s.Key(name))
	case !was.StopFailed:
		return was, now, nil, fmt.Errorf("lease %s is %s, %w", name, StateOf(was), ErrNotStopFailed)
	}
	units, err = s.unitsMirroring(ctx, `{"lease":"`+esc+`",`+was.Raw[1:])
	if err != nil {
		return was, now, nil, err
	}
	reply, server, err := s.run(ctx, clearScript, name, units,
		was.Raw, s.TTL().Milliseconds(), s.Channel(name), esc)
	if err != nil {
		return was, now, nil, err
	}
	now, err = s.reply(name, server, reply, nil)
	return was, now, units, err
}

// unitsMirroring lists the units whose keys hold want: a lease's record
// under its name, as the scripts write it.
func (s *Store) unitsMirroring(ctx context.Context, want string) ([]string, error) {
	prefix := s.UnitKey("")
	var units []string
	err := s.scan(ctx, prefix+"*", func(key string, v any) {
		if str, ok := v.(string); ok && str == want {
			units = append(units, strings.TrimPrefix(key, prefix))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("redislease: read unit keys: %w", err)
	}
	return units, nil
}

// run executes a script on a lease key and its units' keys within
// reply_max, in a pipeline with whatever other requests are ready. A
// script Redis does not have (after a restart or SCRIPT FLUSH) did not
// run, so it is sent again on its own, which loads it.
func (s *Store) run(ctx context.Context, script *redis.Script, name string, units []string, args ...any) (reply []any, server string, err error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	keys := make([]string, 1, 1+len(units))
	keys[0] = s.Key(name)
	for _, u := range units {
		keys = append(keys, s.UnitKey(u))
	}
	cmd, server, err := s.batch.do(ctx, func(p redis.Pipeliner) redis.Cmder { return script.EvalSha(ctx, p, keys, args...) })
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		// In a pipeline too, so that the answer comes with its server's
		// identity; EVAL loads the script.
		cmd, server, err = s.batch.do(ctx, func(p redis.Pipeliner) redis.Cmder { return script.Eval(ctx, p, keys, args...) })
	}
	if err == nil {
		reply, err = cmd.(*redis.Cmd).Slice()
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: %w", ErrUnknown, s.Key(name), err)
	}
	return reply, server, nil
}

// reply interprets a script's reply: the record written, or the error
// that says what the key holds instead. Each value in it is decoded once.
// seen is what the caller saw in the unit keys, for a 'claimed' reply.
func (s *Store) reply(name, server string, reply []any, seen map[string]string) (policy.Record, error) {
	rec, err := s.decodeReply(name, reply, seen)
	// Every record of the answer is what the server that gave it holds.
	if rec.Present {
		rec.Server = server
	}
	if c, ok := errors.AsType[*ConflictError](err); ok {
		c.Current.Server = server
	}
	if l, ok := errors.AsType[*LostError](err); ok {
		l.Current.Server = server
	}
	return rec, err
}

// decodeReply is reply without the server.
func (s *Store) decodeReply(name string, reply []any, seen map[string]string) (policy.Record, error) {
	key := s.Key(name)
	status, _ := reply[0].(string)
	var raw string
	if len(reply) > 1 {
		raw, _ = reply[1].(string)
	}
	switch status {
	case "ok":
		rec, err := s.observed(name, raw)
		if err == nil && len(reply) > 3 {
			// The write happened; a unit key held garbage and was left alone.
			gkey, _ := reply[2].(string)
			gval, _ := reply[3].(string)
			_, err = s.unitGarbage(gkey, gval)
		}
		return rec, err
	case "missing":
		return policy.Record{}, fmt.Errorf("%w: %s", ErrMissing, key)
	case "disabled":
		return policy.Record{}, fmt.Errorf("%w: %s exists", ErrDisabled, s.DisabledKey(name))
	case "garbage":
		if len(reply) > 2 { // a unit key's value
			gkey, _ := reply[2].(string)
			return s.unitGarbage(gkey, raw)
		}
		_, err := Decode(key, raw)
		if err == nil {
			err = &GarbageError{Key: key, Value: raw, Reason: "the script could not read it"}
		}
		return policy.Record{}, err
	case "claimed":
		return policy.Record{}, s.claimed(name, reply, seen)
	case "conflict":
		cur := policy.Absent
		if len(reply) > 1 {
			cur, _ = s.observed(name, raw)
		}
		return policy.Record{}, &ConflictError{Key: key, Current: cur}
	case "lost":
		cur, err := s.observed(name, raw)
		if err != nil {
			return policy.Record{}, err
		}
		return policy.Record{}, &LostError{Key: key, Current: cur}
	}
	return policy.Record{}, fmt.Errorf("%w: %s: unexpected script reply %q", ErrUnknown, key, reply)
}

// unitGarbage is the error for a unit key's value the scripts refused.
func (s *Store) unitGarbage(key, raw string) (policy.Record, error) {
	_, err := DecodeUnit(key, strings.TrimPrefix(key, s.prefix+"unit:"), raw)
	if err == nil {
		err = &GarbageError{Key: key, Value: raw, Reason: "the script could not read it as a unit record"}
	}
	return policy.Record{}, err
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

// Ping checks that Redis answers within reply_max, tells which server it
// is (ErrNoIdentity if it cannot), and lets this user read as a standby
// does (ErrPermission if not): it reads a key under the prefix that no
// lease has.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	_, _, err := s.readProbe(ctx, []string{s.prefix + "lease:"}, true)
	return err
}

// ErrPermission: the Redis user may not run a command unitlease needs
// (its ACL lacks one; the README gives the whole list).
var ErrPermission = errors.New("redislease: the Redis user may not run a command unitlease needs")

// permission marks an error reply that says the user may not run a
// command (NOPERM, or the error of a script that called one).
func permission(err error) error {
	if err != nil && !errors.Is(err, ErrPermission) {
		if m := err.Error(); strings.Contains(m, "NOPERM") || strings.Contains(m, "can't run this command") {
			return fmt.Errorf("%w: %w", ErrPermission, err)
		}
	}
	return err
}
