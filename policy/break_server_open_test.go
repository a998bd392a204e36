//go:build breaks

package policy

import (
	"testing"
	"time"
)

// A scenario that gets through rule 8 at the policy level: it asserts the
// safety property and fails while the hole is open (the Sentinel
// inequality must bound the old master's writes after a promotion).

// TestBreakSplitBrainWithinTheDesignBound: rule 8 asks the old
// master to stop accepting writes "before failover detection plus a lease
// span could let a standby acquire". Too late by a leader bound: a standby
// ages the new master's copy from its first answer (the promotion, at the
// earliest), while the leader's unit lives a leader bound after its last
// renewal the old master accepted. Leader z renews on old master A until
// the promotion T plus s, then fails (A fenced); standby y reads the new
// master B from T. For s well below a lease span, y starts while z's unit
// may still run (within z's last successful renewal + retry +
// renew_deadline + allowance + stop_wait, which the lease span is derived
// from).
func TestBreakSplitBrainWithinTheDesignBound(t *testing.T) {
	tm := DefaultTiming()
	rt, _ := tm.Resolved()
	const T = Instant(60 * time.Second)
	worst := time.Duration(0)
	overlaps, runs := 0, 0
	for _, split := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second} {
		hits := 0
		for seed := uint64(1); seed <= 20; seed++ {
			runs++
			z := leader(t, tm)
			v, lastOK := uint64(2), z.m.LastRenewal()
			frozen := v // what B has: the last write replicated before T
			for z.m.State() == Leader {
				z.wake()
				if !z.has(Renew) {
					continue
				}
				if z.now <= T.Add(split) {
					v++
					if z.now <= T {
						frozen = v
					}
					lastOK = z.now
					z.after(10*time.Millisecond, with(RenewOK, on(held("a", v), "A")))
				} else {
					z.after(rt.ReplyMax, ev(RenewFailed))
				}
			}
			unitDead := lastOK.Add(rt.Retry + rt.RenewDeadline + rt.Allowance + rt.StopWait)

			m, err := New(Config{Timing: tm, Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			y := &driver{t: t, m: m}
			y.at(0, ev(Tick)).want(Stopping, StopUnit)
			y.at(0, ev(UnitStopped)).want(Standby, Observe)
			y.at(time.Duration(T), seen(on(held("a", frozen), "B"))).want(Standby)
			y.pollUntil(on(held("a", frozen), "B"), T.Add(3*rt.LeaseSpan))
			if !y.has(Acquire) {
				t.Fatalf("y never acquires")
			}
			y.after(10*time.Millisecond, with(AcquireOK, on(held("y", frozen+1), "B"))).want(Starting, StartUnit)
			if y.now < unitDead {
				overlaps++
				hits++
				worst = max(worst, unitDead.Sub(y.now))
			}
		}
		if hits > 0 && split < rt.LeaseSpan {
			t.Errorf("old master writable %v after the promotion (under the lease span %v): in %d of 20 runs y starts while z's unit may still run",
				split, rt.LeaseSpan, hits)
		}
	}
	t.Logf("%d of %d split-brain runs overlap, by up to %v", overlaps, runs, worst)
}
