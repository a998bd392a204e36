package policy

import (
	"fmt"
	"math"
	"time"
)

// Instant is a reading of the node's monotonic clock: the time since an
// origin the caller picks once, e.g. policy.Instant(time.Since(start))
// where start is a time.Time taken with its monotonic reading. Wall-clock
// time must never be used (rule 5).
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
//
// A unit belongs to one lease across the cluster. When the store finds one
// of the lease's units named by another lease's live record, it reports
// that instead, marked by Other: the standby ages it like a record
// held by another node (every renewal of the other lease changes it), and
// acquires over it only once it stayed the same for the lease span. Such a
// record is never Released.
type Record struct {
	Present  bool // false: the key is missing; the other fields are empty
	Released bool // the record's state is `released`
	// StopFailed: the record's state is `stop_failed`: its holder could
	// not stop its units. No standby acquires over it, however old; its
	// holder releases it once a stop succeeds, or an operator clears it.
	// In an Action's Record for Renew, it is the state to write.
	StopFailed bool
	// Fresh: the acquisition that wrote this record claimed a unit key
	// that was missing, which a data loss could make missing again: the
	// node confirms before it starts, as over a missing lease key.
	Fresh bool
	// (The flags come first, together: the machine keeps two records and
	// copies them on every step.)

	// Raw is the stored bytes, exactly; for a record of another lease, the
	// store's encoding of every value the observation read.
	Raw     string
	Holder  string
	Token   string
	Version uint64
	// Next, on a released record, is the node a planned handoff offered
	// the lease to: that node may acquire it at once, as any node may a
	// released record without one; every other node ages it like a held
	// record, for the lease span, before it may.
	Next string
	// LeaseSpan is the writer's lease span, as its record says (0: not
	// said). A standby waits the longer of it and its own: a holder
	// configured with a longer span may run its unit that much longer.
	LeaseSpan time.Duration
	// Other, if not nil, marks a record of another lease that names one
	// of this lease's units; Holder, Version and LeaseSpan are that
	// record's (LeaseSpan the longest of the values read). A pointer, so
	// that the records the machine copies on every step stay small; what
	// it points to is never changed once made.
	Other *OtherLease
	// Server is the identity of the Redis server that answered with this
	// record (its run id and replication id), read in the same round trip
	// on the same connection, or "" when the store does not tell. A
	// server that restarts, is restored or is failed over to answers with
	// another identity, and may answer from an older state (rules 7
	// and 8): a record is trusted only as what that server holds.
	Server string
}

// OtherLease names another lease whose live record names Unit, one of
// this lease's units.
type OtherLease struct {
	Lease string
	Unit  string
	// Released: that record is released, and every other lease's record
	// the observation read too (a live one is named first). A standby
	// still ages it for the lease span: it stands for the unit key's
	// value, which a data loss could turn into a missing key.
	Released bool
}

// Absent is the record of a missing key.
var Absent = Record{}

// Extends reports whether r is a later write of held's tenure: held (not
// released), by the same holder with the same token, which no other
// acquisition reuses, at a higher version, of this lease (not another's).
// Such a record is this node's own renewal whose reply was lost, not a
// loss.
func (r Record) Extends(held Record) bool {
	return r.Present && !r.Released && r.Other == nil && held.Token != "" && r.Token == held.Token && r.Holder == held.Holder && r.Version > held.Version
}

// Same reports whether r and o are the same stored value.
func (r Record) Same(o Record) bool { return r.Present == o.Present && r.Raw == o.Raw }

func (r Record) String() string {
	switch {
	case !r.Present:
		return "missing"
	case r.Other != nil:
		how := "held"
		if r.Other.Released {
			how = "released"
		}
		return fmt.Sprintf("%s %s under lease %s by %s at version %d", r.Other.Unit, how, r.Other.Lease, r.Holder, r.Version)
	case r.Released && r.Next != "":
		return fmt.Sprintf("released by %s to %s at version %d", r.Holder, r.Next, r.Version)
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
