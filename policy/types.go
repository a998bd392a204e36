package policy

import (
	"fmt"
	"math"
	"time"
)

// Instant is a reading of the node's monotonic clock: the time since an
// origin the caller picks once, e.g. policy.Instant(time.Since(start))
// where start is a time.Time taken with its monotonic reading. Wall-clock
// time must never be used (DESIGN.md rule 5).
type Instant time.Duration

// Never is the Instant after every other: no timer is wanted.
const Never = Instant(math.MaxInt64)

// Add returns i+d.
func (i Instant) Add(d time.Duration) Instant { return i + Instant(d) }

// Sub returns the duration i-j.
func (i Instant) Sub(j Instant) time.Duration { return time.Duration(i - j) }

func (i Instant) String() string {
	if i == Never {
		return "never"
	}
	return "+" + time.Duration(i).String()
}

// Record is what the store holds under the lease key, as the store read or
// wrote it: the one shape of a record between the store and the policy.
// The store decodes a value once into it and keeps the exact bytes in Raw.
// Two records are the same value exactly when Same says so: the policy
// ages and compares raw bytes, and a missing key is a value like any other.
// The policy decides on the decoded fields too: Released (the released
// shortcut), LeaseSpan (the writer's span, waited out if longer), and
// Holder, Token and Version in Extends (a renewal whose reply was lost is
// not a loss); the store compares them in its scripts.
type Record struct {
	Present  bool   // false: the key is missing; the other fields are empty
	Raw      string // the stored bytes, exactly
	Holder   string
	Token    string
	Version  uint64
	Released bool // the record's state is `released`
	// LeaseSpan is the writer's lease span, as its record says (0: not
	// said). A standby waits the longer of it and its own: a holder
	// configured with a longer span may run its unit that much longer.
	LeaseSpan time.Duration
}

// Absent is the record of a missing key.
var Absent = Record{}

// Extends reports whether r is a later write of held's tenure: held (not
// released), by the same holder with the same token, which no other
// acquisition reuses, at a higher version. Such a record is this node's
// own renewal whose reply was lost, not a loss.
func (r Record) Extends(held Record) bool {
	return r.Present && !r.Released && held.Token != "" && r.Token == held.Token && r.Holder == held.Holder && r.Version > held.Version
}

// Same reports whether r and o are the same stored value.
func (r Record) Same(o Record) bool { return r.Present == o.Present && r.Raw == o.Raw }

func (r Record) String() string {
	switch {
	case !r.Present:
		return "missing"
	case r.Released:
		return fmt.Sprintf("released by %s at version %d", r.Holder, r.Version)
	}
	return fmt.Sprintf("held by %s at version %d", r.Holder, r.Version)
}

// names renders an enum for logs; out of range values print as kind(n).
func name(names []string, kind string, i uint8) string {
	if int(i) < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", kind, i)
}
