package spec

import "testing"

// BenchmarkCheckSeed36 checks the module as configured in Lease.cfg
// (LeaseSpan 36, ReplyMax 0): every reachable state, both invariants and
// Handoff.
func BenchmarkCheckSeed36(b *testing.B) {
	l := Seed(36, 0)
	b.ReportAllocs()
	for b.Loop() {
		r, err := l.Check()
		if err != nil || !r.OK() {
			b.Fatal(r.Violated, err)
		}
	}
}

// BenchmarkCheckSeed56 checks the largest instance the sweep needs
// (ReplyMax 20 at its smallest safe LeaseSpan).
func BenchmarkCheckSeed56(b *testing.B) {
	l := Seed(56, 20)
	b.ReportAllocs()
	for b.Loop() {
		if r, err := l.Check(); err != nil || !r.OK() {
			b.Fatal(r.Violated, err)
		}
	}
}

// BenchmarkCheckFailoverSeed checks LeaseFailover.tla as configured in
// LeaseFailover.cfg (LeaseSpan 36, MaxLag 10, Detect 10, Rule): every
// reachable state, both invariants and Handoff.
func BenchmarkCheckFailoverSeed(b *testing.B) {
	f := SeedFailover(36, 10, 10, true)
	b.ReportAllocs()
	for b.Loop() {
		if r, err := f.Check(); err != nil || !r.OK() {
			b.Fatal(r.Violated, err)
		}
	}
}
