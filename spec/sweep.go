package spec

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// SafeMinimum is the law the sweep finds: ProcessExclusion holds exactly
// when LeaseSpan >= ReplyMax + Retry + Renew + StopWait + 1.
//
// Why: the old process may live until the leader's Reap, at the latest
// ReplyMax + Retry + Renew + StopWait after the start, and it may be reaped
// only after the standby's Spawn in that same instant. The standby can
// spawn at the earliest LeaseSpan after it first saw the committed record,
// which it can see at time 0. The bound is always sufficient. It is also
// necessary when some sum of poll intervals, each in PollLow..PollHigh, hits
// every instant in LeaseSpan..ReplyMax+Retry+Renew+StopWait, as it does for
// the module's polls 5..11 (every sum >= 5 is reachable); with sparser polls
// a shorter LeaseSpan can happen to be safe, and nothing should rely on it.
func (l Lease) SafeMinimum() int {
	return l.ReplyMax + l.Retry + l.Renew + l.StopWait + 1
}

// SweepRow is the sweep's finding for one ReplyMax.
type SweepRow struct {
	ReplyMax int `json:"reply_max"`
	// MinSafe is the smallest LeaseSpan for which ProcessExclusion holds.
	MinSafe int `json:"min_safe_lease_span"`
	// CheckedTo is the largest LeaseSpan checked above MinSafe.
	CheckedTo int `json:"checked_to"`
	// HoldsAbove reports whether ProcessExclusion holds for every LeaseSpan
	// in MinSafe..CheckedTo.
	HoldsAbove bool `json:"holds_above"`
}

// Sweep finds, for each ReplyMax in 0..20 with base's other timings, the
// smallest LeaseSpan for which ProcessExclusion holds, and checks every
// LeaseSpan up to `above` more than that.
func Sweep(base Lease, above int) ([]SweepRow, error) {
	rows := make([]SweepRow, 21)
	errs := make([]error, len(rows))
	work := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for replyMax := range work {
				l := base
				l.ReplyMax = replyMax
				rows[replyMax], errs[replyMax] = sweepOne(l, above)
			}
		})
	}
	// Largest first: they take longest.
	for replyMax := len(rows) - 1; replyMax >= 0; replyMax-- {
		work <- replyMax
	}
	close(work)
	wg.Wait()
	return rows, errors.Join(errs...)
}

func sweepOne(l Lease, above int) (SweepRow, error) {
	row := SweepRow{ReplyMax: l.ReplyMax, HoldsAbove: true}
	// Exclusion holds once LeaseSpan passes Limit's other terms (the standby
	// cannot acquire before LeaseSpan); search no further than that.
	ceiling := l.SafeMinimum() + 2*l.PollHigh
	for l.LeaseSpan = 1; row.MinSafe == 0; l.LeaseSpan++ {
		if l.LeaseSpan > ceiling {
			return row, fmt.Errorf("spec: no safe LeaseSpan up to %d for %+v", ceiling, l)
		}
		ok, err := l.Excludes()
		if err != nil {
			return row, err
		}
		if ok {
			row.MinSafe = l.LeaseSpan
		}
	}
	row.CheckedTo = row.MinSafe + above
	for ; l.LeaseSpan <= row.CheckedTo; l.LeaseSpan++ {
		ok, err := l.Excludes()
		if err != nil {
			return row, err
		}
		row.HoldsAbove = row.HoldsAbove && ok
	}
	return row, nil
}
