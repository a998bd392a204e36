package redislease

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/unitlease/unitlease/internal/inert"
	"github.com/unitlease/unitlease/policy"
)

// States of a record.
const (
	StateHeld     = "held"
	StateReleased = "released"
	// StateStopFailed is a holder's record while it cannot stop its
	// units: no standby acquires over it, however old, until its holder
	// stops them and releases it, or an operator clears it (Store.Clear).
	StateStopFailed = "stop_failed"
)

// A lease key's value is a record: JSON written only by this package's
// Lua scripts, with its fields in this order:
//
//	{"holder":"node-a","version":7,"token":"<32 hex digits>","state":"held","lease_span_ms":36072}
//	{"holder":"node-a","version":8,"token":"<32 hex digits>","state":"released","lease_span_ms":36072,"next":"node-b"}
//
// holder is the node that acquired (and, if released, released) it;
// version rises by one with every successful write; token is fresh for
// every acquisition, and only its holder knows it, so only it can renew or
// release; state is held, stop_failed (held by a node that could not stop
// its units) or released; lease_span_ms is the writer's lease
// span, so a standby configured with a shorter one can wait the longer of
// the two; next, only on a released record and only when a handoff named
// one, is the node the release offers the lease to (the others age it for
// the lease span). Decode reads it into a policy.Record, the one shape a record
// has in unitlease, with the exact bytes in Raw.

// wire is a record's JSON, in the scripts' field order.
type wire struct {
	Holder      string `json:"holder"`
	Version     uint64 `json:"version"`
	Token       string `json:"token"`
	State       string `json:"state"`
	LeaseSpanMS uint64 `json:"lease_span_ms"`
	Next        string `json:"next,omitempty"`
}

// StateOf is a present record's state: StateHeld, StateStopFailed or
// StateReleased.
func StateOf(r policy.Record) string {
	switch {
	case r.Released:
		return StateReleased
	case r.StopFailed:
		return StateStopFailed
	}
	return StateHeld
}

// knownState reports whether s is a record's state.
func knownState(s string) bool {
	return s == StateHeld || s == StateReleased || s == StateStopFailed
}

// ErrGarbage reports a value in a lease key that is not a record this
// package wrote. It is never overwritten, except by Store.Overwrite.
var ErrGarbage = errors.New("redislease: not a lease record")

// GarbageError says which key held what, and why it is not a record.
type GarbageError struct {
	Key    string
	Value  string
	Reason string
}

func (e *GarbageError) Error() string {
	v := e.Value
	if len(v) > 120 {
		v = v[:120]
	}
	key := e.Key
	if strconv.Quote(key) != `"`+key+`"` {
		key = strconv.Quote(key) // a key name with escapes stays one line, and inert
	}
	// Reason quotes parts of the value too: the whole message is made
	// inert, since it reaches the journal and `unitlease reset`'s output.
	return inert.Text(fmt.Sprintf("redislease: key %s: %s (value %s)", key, e.Reason, strconv.Quote(v)))
}

func (e *GarbageError) Unwrap() error { return ErrGarbage }

const (
	maxNodeLen   = 253 // a hostname
	tokenLen     = 32  // 16 random bytes in hex
	maxRecordLen = 1024
)

// ValidNode checks a node name: 1 to 253 letters, digits, '.', '_' or '-',
// starting with a letter or digit. Names this plain need no escaping in
// JSON, so the Lua scripts and Encode write the same bytes.
func ValidNode(name string) error {
	if name == "" || len(name) > maxNodeLen {
		return fmt.Errorf("node name %q must be 1 to %d characters", name, maxNodeLen)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("node name %q: character %q at %d is not a letter, digit, '.', '_' or '-'", name, c, i)
		}
	}
	return nil
}

func validToken(t string) bool {
	if len(t) != tokenLen {
		return false
	}
	for _, c := range t {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Decode parses the value of a lease key strictly: every field present
// with the right type, a version of at least 1, a known state, nothing
// else. The record it returns keeps raw as Raw, and its Holder and Token
// share raw's memory. On a *GarbageError it returns raw as a present
// record with no fields, so that the value can still be shown and
// compared. key is only for the error.
func Decode(key, raw string) (policy.Record, error) {
	if r, ok := decodeCanonical(raw); ok {
		return r, nil
	}
	w, err := decodeJSON(key, raw)
	if err != nil {
		return policy.Record{Present: true, Raw: raw}, err
	}
	return w.record(raw), nil
}

func (w wire) record(raw string) policy.Record {
	return policy.Record{Present: true, Raw: raw, Holder: w.Holder, Token: w.Token, Version: w.Version,
		Released: w.State == StateReleased, StopFailed: w.State == StateStopFailed,
		LeaseSpan: time.Duration(w.LeaseSpanMS) * time.Millisecond, Next: w.Next}
}

// decodeCanonical reads a valid record written exactly as Encode (and the
// scripts) write it, the common case, without the JSON decoder. Anything
// else, valid or not, is left to decodeJSON.
func decodeCanonical(raw string) (policy.Record, bool) {
	var w wire
	rest, ok := raw, true
	field := func(prefix string, until byte) string {
		if !ok {
			return ""
		}
		if rest, ok = strings.CutPrefix(rest, prefix); !ok {
			return ""
		}
		i := strings.IndexByte(rest, until)
		if i < 0 {
			ok = false
			return ""
		}
		v := rest[:i]
		rest = rest[i:]
		return v
	}
	w.Holder = field(`{"holder":"`, '"')
	version := field(`","version":`, ',')
	w.Token = field(`,"token":"`, '"')
	w.State = field(`","state":"`, '"')
	span := field(`","lease_span_ms":`, '}')
	if i := strings.IndexByte(span, ','); ok && i >= 0 { // ,"next":"NODE" on a released record
		next, cut := strings.CutPrefix(span[i:], `,"next":"`)
		if !cut || !strings.HasSuffix(next, `"`) || w.State != StateReleased || ValidNode(next[:len(next)-1]) != nil {
			return policy.Record{}, false
		}
		span, w.Next = span[:i], next[:len(next)-1]
	}
	if !ok || rest != "}" || !canonicalUint(version) || !canonicalUint(span) {
		return policy.Record{}, false
	}
	var err1, err2 error
	w.Version, err1 = strconv.ParseUint(version, 10, 53)
	w.LeaseSpanMS, err2 = strconv.ParseUint(span, 10, 53)
	if err1 != nil || err2 != nil || w.Version == 0 || ValidNode(w.Holder) != nil || !validToken(w.Token) ||
		!knownState(w.State) || w.LeaseSpanMS > maxLeaseSpanMS {
		return policy.Record{}, false
	}
	return w.record(raw), true
}

// canonicalUint reports whether s is digits as JSON writes an unsigned
// integer: no sign, no leading zero.
func canonicalUint(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// decodeJSON is Decode for any JSON text: strict about fields, types and
// ranges, and the one that says what is wrong.
func decodeJSON(key, raw string) (wire, error) {
	bad := func(format string, args ...any) (wire, error) {
		return wire{}, &GarbageError{Key: key, Value: raw, Reason: fmt.Sprintf(format, args...)}
	}
	if len(raw) > maxRecordLen {
		return bad("%d bytes, more than a record's %d", len(raw), maxRecordLen)
	}
	if !utf8.ValidString(raw) {
		return bad("not UTF-8")
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var f struct {
		Holder      *string         `json:"holder"`
		Version     json.RawMessage `json:"version"`
		Token       *string         `json:"token"`
		State       *string         `json:"state"`
		LeaseSpanMS json.RawMessage `json:"lease_span_ms"`
		Next        *string         `json:"next"`
	}
	if err := dec.Decode(&f); err != nil {
		return bad("not a lease record: %v", err)
	}
	if dec.More() {
		return bad("trailing data after the record")
	}
	if msg := exactFields(raw); msg != "" {
		return bad("%s", msg)
	}
	if f.Holder == nil || f.Version == nil || f.Token == nil || f.State == nil || f.LeaseSpanMS == nil {
		return bad("a field is missing (want holder, version, token, state, lease_span_ms)")
	}
	r := wire{Holder: *f.Holder, Token: *f.Token, State: *f.State}
	if f.Next != nil {
		switch {
		case *f.State != StateReleased:
			return bad("next names a node on a %q record; only a released one offers the lease to a node", *f.State)
		case ValidNode(*f.Next) != nil:
			return bad("next: %v", ValidNode(*f.Next))
		}
		r.Next = *f.Next
	}
	var err error
	// Parsing the raw JSON text refuses strings, fractions, exponents and
	// signs alike.
	if r.Version, err = strconv.ParseUint(string(f.Version), 10, 53); err != nil || r.Version == 0 {
		return bad("version %s is not an integer in 1..2^53", f.Version)
	}
	if r.LeaseSpanMS, err = strconv.ParseUint(string(f.LeaseSpanMS), 10, 53); err != nil {
		return bad("lease_span_ms %s is not a non-negative integer", f.LeaseSpanMS)
	}
	switch {
	case ValidNode(r.Holder) != nil:
		return bad("holder: %v", ValidNode(r.Holder))
	case !validToken(r.Token):
		return bad("token is not %d lowercase hex digits", tokenLen)
	case !knownState(r.State):
		return bad("state %q is none of %q, %q and %q", r.State, StateHeld, StateStopFailed, StateReleased)
	case r.LeaseSpanMS > maxLeaseSpanMS:
		return bad("lease_span_ms %d is above %d, the longest lease span (%v): a standby would wait that long", r.LeaseSpanMS, maxLeaseSpanMS, policy.MaxDuration)
	}
	return r, nil
}

// maxLeaseSpanMS is the longest lease span a record may carry: the
// longest one the timing allows.
var maxLeaseSpanMS = uint64(policy.MaxDuration / time.Millisecond)

// exactFields checks that raw (a JSON object that decoded) names each
// field exactly as the record does, once: the JSON decoder matches names
// case-insensitively (with Unicode folding) and keeps the last of two,
// Lua's decoder matches them exactly, and a record must mean one thing to
// both. It returns what is wrong, or "".
func exactFields(raw string) string {
	dec := json.NewDecoder(strings.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		k, _ := t.(string)
		switch k {
		case "holder", "version", "token", "state", "lease_span_ms", "next":
		default:
			return fmt.Sprintf("the field %q is not one of holder, version, token, state, lease_span_ms, next as written", k)
		}
		if seen[k] {
			return fmt.Sprintf("the field %q appears twice", k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}

// Encode writes r's fields (not its Raw) as the scripts write a record.
// Tests use it; the scripts build the same bytes in Lua.
func Encode(r policy.Record) string {
	b, _ := json.Marshal(wire{Holder: r.Holder, Version: r.Version, Token: r.Token, State: StateOf(r),
		LeaseSpanMS: uint64(r.LeaseSpan / time.Millisecond), Next: r.Next})
	return string(b)
}
