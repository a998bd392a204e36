package redislease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/unitlease/unitlease/policy"
)

// A unit belongs to one lease across the cluster. Exclusion is per lease,
// so without more a unit annotated with lease A on one node and lease B on
// another could run under both at once (a rolling re-annotation does
// exactly that). The holder of a lease therefore also keeps, for each of
// the lease's units, the key <prefix>unit:<unit>, whose value is the
// lease's record with the lease's name in front:
//
//	{"lease":"vpn","holder":"node-a","version":7,"token":"…","state":"held","lease_span_ms":36072}
//
// The scripts write it together with the lease key (acquire, renew,
// release, same TTL), so it changes exactly when the lease's record does.
// A standby of another lease that names the unit ages that record like one
// held by another node, and may acquire only once it stayed the same for
// the lease span, or names no live record any more.

// ErrClaimed: a unit of the lease is named by another lease's live record
// that the caller did not observe and age.
var ErrClaimed = errors.New("redislease: unit held under another lease")

// ClaimedError refuses an acquisition of Lease: one of its units, Unit, is
// named by Current, another lease's record (or by nothing: !Present), and
// that is not what the caller observed and aged there.
type ClaimedError struct {
	Lease   string
	Unit    string
	Key     string        // the unit key
	Current policy.Record // what it holds now, marked with its lease (Record.Other)
	Seen    string        // the other lease's record the caller aged there ("" for none)
}

func (e *ClaimedError) Error() string {
	now := "now missing"
	switch c := e.Current; {
	case c.Other != nil && c.Released:
		now = fmt.Sprintf("now released under lease %s by %s at version %d", c.Other.Lease, c.Holder, c.Version)
	case c.Other != nil:
		now = fmt.Sprintf("held under lease %s by %s at version %d", c.Other.Lease, c.Holder, c.Version)
	}
	if e.Seen == "" {
		return fmt.Sprintf("redislease: lease %s not acquired: unit %s is %s, which this node has not aged", e.Lease, e.Unit, now)
	}
	return fmt.Sprintf("redislease: lease %s not acquired: unit %s is %s, not the record of lease %s this node aged", e.Lease, e.Unit, now, unitLeaseOf(e.Seen))
}

func (e *ClaimedError) Unwrap() error { return ErrClaimed }

// OtherLease is the other lease: the one the unit key names now, or if it
// is missing, the one whose record the caller aged there.
func (e *ClaimedError) OtherLease() string {
	if e.Current.Other != nil {
		return e.Current.Other.Lease
	}
	return unitLeaseOf(e.Seen)
}

// UnitKey is the Redis key of a unit: the lease that last claimed it.
func (s *Store) UnitKey(unit string) string { return s.prefix + "unit:" + unit }

// escapeLease writes a lease name as it stands between quotes in a unit
// key's value. Lease names use the characters of unit names (letters,
// digits and :-_.@\), of which only the backslash needs escaping.
func escapeLease(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("redislease: lease name is empty")
	}
	for i := 0; i < len(name); i++ {
		if !leaseByte(name[i]) && name[i] != '\\' {
			return "", fmt.Errorf("redislease: lease name %q: byte %q is not a letter, digit or :-_.@\\", name, name[i])
		}
	}
	return strings.ReplaceAll(name, `\`, `\\`), nil
}

func leaseByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(":_.@-", c) >= 0
}

// EncodeUnit writes a unit key's value for lease and its record r, as the
// scripts write it. Tests use it.
func EncodeUnit(lease string, r policy.Record) string {
	esc, _ := escapeLease(lease)
	return `{"lease":"` + esc + `",` + Encode(r)[1:]
}

// DecodeUnit parses a unit key's value: exactly as the scripts write it
// (the scripts apply the same rule), anything else is a *GarbageError. The
// record it returns is marked with its lease and unit (Record.Other), and
// keeps raw as Raw.
func DecodeUnit(key, unit, raw string) (policy.Record, error) {
	bad := func(reason string) (policy.Record, error) {
		return policy.Record{Present: true, Raw: raw}, &GarbageError{Key: key, Value: raw, Reason: reason}
	}
	rest, ok := strings.CutPrefix(raw, `{"lease":"`)
	i := strings.IndexByte(rest, '"')
	if !ok || i < 1 || !strings.HasPrefix(rest[i:], `",`) {
		return bad("not a unit record (want the lease's name, then its record)")
	}
	esc := rest[:i]
	plain := strings.ReplaceAll(esc, `\\`, "")
	for j := 0; j < len(plain); j++ {
		if !leaseByte(plain[j]) {
			return bad(fmt.Sprintf("lease name %s is not letters, digits and :-_.@\\", strconv.Quote(esc)))
		}
	}
	r, ok := decodeCanonical("{" + rest[i+2:])
	if !ok {
		return bad("the lease's record is not one the scripts write")
	}
	r.Raw, r.Other = raw, &policy.OtherLease{Lease: strings.ReplaceAll(esc, `\\`, `\`), Unit: unit}
	return r, nil
}

// unitLeaseOf is the lease a unit key's value names, for messages.
func unitLeaseOf(raw string) string {
	if r, err := DecodeUnit("", "", raw); err == nil {
		return r.Other.Lease
	}
	return "?"
}

// The observation of a lease whose unit keys name other leases' live
// records is a composite: its Raw encodes every value the observation
// read, so that any change to any of them changes it, and so that Acquire
// can tell the script exactly what to compare. It is the lease key's value
// ("-" and nothing else when missing, "+" and a netstring when present),
// then, for each such unit, a netstring of the unit's name and one of its
// key's value:
//
//	+<len>:<lease value>,<len>:<unit>,<len>:<unit value>,...
type composite struct {
	own   policy.Record // the lease key's value (policy.Absent: missing)
	units []string      // units named by other leases' live records
	vals  []string      // their keys' values
}

func netstring(b *strings.Builder, s string) {
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
	b.WriteByte(',')
}

// record is the observation as a policy.Record: marked with the first
// other lease and its unit, that record's holder and version, the longest
// lease span among the values read, and stop_failed if any of them is.
func (c composite) record(foreign []policy.Record) policy.Record {
	var b strings.Builder
	if c.own.Present {
		b.WriteByte('+')
		netstring(&b, c.own.Raw)
	} else {
		b.WriteByte('-')
	}
	span, stopFailed := c.own.LeaseSpan, c.own.StopFailed
	for i, u := range c.units {
		netstring(&b, u)
		netstring(&b, c.vals[i])
		span = max(span, foreign[i].LeaseSpan)
		stopFailed = stopFailed || foreign[i].StopFailed
	}
	f := foreign[0]
	other := f.Other
	if f.Released {
		o := *f.Other
		o.Released = true
		other = &o
	}
	return policy.Record{Present: true, Raw: b.String(), Holder: f.Holder, Version: f.Version,
		LeaseSpan: span, StopFailed: stopFailed, Other: other}
}

// parseComposite reads back a composite's Raw: the lease key's value, and
// the value each unit's key had.
func parseComposite(raw string) (own policy.Record, vals map[string]string, ok bool) {
	next := func() (string, bool) {
		n, rest, found := strings.Cut(raw, ":")
		l, err := strconv.Atoi(n)
		if !found || err != nil || l < 0 || len(rest) < l+1 || rest[l] != ',' {
			return "", false
		}
		raw = rest[l+1:]
		return rest[:l], true
	}
	if raw == "" {
		return own, nil, false
	}
	flag := raw[0]
	raw = raw[1:]
	switch flag {
	case '+':
		v, ok := next()
		if !ok {
			return own, nil, false
		}
		own = policy.Record{Present: true, Raw: v}
	case '-':
	default:
		return own, nil, false
	}
	vals = map[string]string{}
	for raw != "" {
		u, ok1 := next()
		v, ok2 := next()
		if !ok1 || !ok2 {
			return own, nil, false
		}
		vals[u] = v
	}
	return own, vals, len(vals) > 0
}

// observeUnits reads the lease key and the unit keys at once (MGET) and
// builds the observation: the lease's own record when no unit key names
// another lease's live record, else the composite of all of them.
func (s *Store) observeUnits(ctx context.Context, name string, units []string) (policy.Record, error) {
	keys := make([]string, 1+len(units))
	keys[0] = s.Key(name)
	for i, u := range units {
		keys[1+i] = s.UnitKey(u)
	}
	vals, server, err := s.read(ctx, keys)
	if err != nil {
		return policy.Record{}, fmt.Errorf("redislease: observe %s: %w", s.Key(name), err)
	}
	for i, v := range vals {
		if odd, ok := v.(*Odd); ok {
			return odd.garbage(keys[i])
		}
	}
	c := composite{own: policy.Absent}
	if raw, ok := vals[0].(string); ok {
		own, err := s.observed(name, raw)
		if err != nil {
			return own, err
		}
		c.own = own
	}
	var foreign []policy.Record
	for i, u := range units {
		raw, ok := vals[1+i].(string)
		if !ok {
			continue
		}
		r, err := DecodeUnit(keys[1+i], u, raw)
		if err != nil {
			return r, err
		}
		// Another lease's record, released too: what a standby ages must
		// change when it does (a released record claimed by its own
		// lease, then lost with Redis's data, would otherwise look like
		// the missing key aged before). Live ones first: the mark names one.
		if r.Other.Lease != name {
			c.units, c.vals = append(c.units, u), append(c.vals, raw)
			foreign = append(foreign, r)
			if n := len(foreign) - 1; !r.Released && foreign[0].Released {
				c.units[0], c.units[n] = c.units[n], c.units[0]
				c.vals[0], c.vals[n] = c.vals[n], c.vals[0]
				foreign[0], foreign[n] = foreign[n], foreign[0]
			}
		}
	}
	rec := c.own
	if len(foreign) > 0 {
		rec = c.record(foreign)
	}
	rec.Server = server
	return rec, nil
}

// claimed builds the error of a 'claimed' reply: the unit key, and what it
// holds now (absent if missing).
func (s *Store) claimed(name string, reply []any, seen map[string]string) error {
	key, _ := reply[1].(string)
	unit := strings.TrimPrefix(key, s.prefix+"unit:")
	cur := policy.Absent
	if len(reply) > 2 {
		if raw, ok := reply[2].(string); ok {
			var err error
			if cur, err = DecodeUnit(key, unit, raw); err != nil {
				return err
			}
		}
	}
	return &ClaimedError{Lease: name, Unit: unit, Key: key, Current: cur, Seen: seen[unit]}
}
