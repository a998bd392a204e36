package policy

// Adversarial review of the allowance in the lease span (commit 60adadc):
// probes of the arithmetic. Each passes: the bound holds as written.

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// SafeMinimum is above (retry + renew_deadline + allowance + stop_wait)
// · (1+ρ)/(1-ρ) exactly (rationals), for any timing Validate accepts,
// with whatever allowance (sub-millisecond parts, up to MaxDuration):
// aboveScaled's microsecond rounding never rounds the bound down.
func TestBreakSafeMinimumCoversTheAllowanceExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pick := func() time.Duration { return time.Duration(1 + r.Int64N(int64(MaxDuration))) }
	rho := big.NewRat(DriftPPM, 1_000_000)
	one := big.NewRat(1, 1)
	for i := range 200000 {
		tm := Timing{Retry: pick(), RenewDeadline: pick(), StopWait: pick(), Allowance: pick()}
		if i%3 == 0 {
			tm.Allowance = time.Duration(1 + r.Int64N(int64(time.Millisecond)))
		}
		bound := tm.Retry + tm.RenewDeadline + tm.Allowance + tm.StopWait
		need := new(big.Rat).Mul(new(big.Rat).SetInt64(int64(bound)), new(big.Rat).Add(one, rho))
		need.Quo(need, new(big.Rat).Sub(one, rho))
		got := tm.SafeMinimum()
		if new(big.Rat).SetInt64(int64(got)).Cmp(need) <= 0 {
			t.Fatalf("%+v: SafeMinimum %v is not above %v", tm, got, need.FloatString(3))
		}
		if got%time.Millisecond != 0 {
			t.Fatalf("%+v: SafeMinimum %v is not whole milliseconds", tm, got)
		}
	}
}

// A lease span set in the file is checked against the allowance: one
// nanosecond below SafeMinimum is refused, SafeMinimum accepted, and the
// allowance is a key Validate refuses when zero or over MaxDuration.
func TestBreakLeaseSpanBelowAllowanceRefused(t *testing.T) {
	tm := DefaultTiming()
	for _, a := range []time.Duration{DefaultAllowance, 767 * time.Millisecond, 13 * time.Second, 30 * time.Minute} {
		tm.Allowance = a
		tm.LeaseSpan = tm.SafeMinimum() - 1
		if err := tm.Validate(); err == nil {
			t.Fatalf("allowance %v: lease_span %v below the safe minimum accepted", a, tm.LeaseSpan)
		}
		tm.LeaseSpan = tm.SafeMinimum()
		if err := tm.Validate(); err != nil {
			t.Fatalf("allowance %v: the safe minimum refused: %v", a, err)
		}
	}
	for _, a := range []time.Duration{0, -1, MaxDuration + 1} {
		tm.Allowance, tm.LeaseSpan = a, 0
		if err := tm.Validate(); err == nil {
			t.Fatalf("allowance %v accepted", a)
		}
	}
}
