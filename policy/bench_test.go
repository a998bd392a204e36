package policy

import (
	"testing"
	"time"
)

// sink keeps the compiler from discarding the steps.
var sink int

// use does what a daemon does with a step's output: reads every action.
func use(o *Output) {
	for a := range o.Actions() {
		sink += int(a.Kind)
	}
}

// BenchmarkLeaderStep: a leader at its steady cadence, alternating the
// Tick that sends a renewal and the reply that moves its anchor; each
// step's actions are read as the daemon reads them.
func BenchmarkLeaderStep(b *testing.B) {
	d := leader(b, DefaultTiming())
	m, now := d.m, d.now
	events := [2]Event{{Kind: Tick}, with(RenewOK, held("a", 3))}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			now = m.renewDue()
		} else {
			now = now.Add(time.Millisecond)
		}
		var out Output
		m, out = m.Step(now, events[i%2])
		use(&out)
		i++
	}
	if m.State() != Leader {
		b.Fatalf("ended in %v", m.State())
	}
}

// BenchmarkStandbyStep: a standby watching a leader that renews, alternating
// the Tick that sends a poll and the reply with the new record.
func BenchmarkStandbyStep(b *testing.B) {
	d := booted(b, DefaultTiming())
	m, now := d.m, d.now
	records := [2]Record{held("b", 1), held("b", 2)}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e := Event{Kind: Tick}
		if i%2 == 0 {
			now = now.Add(time.Millisecond)
			e = seen(records[i/2%2])
		} else {
			now = m.pollAt
		}
		var out Output
		m, out = m.Step(now, e)
		use(&out)
		i++
	}
	if m.State() != Standby {
		b.Fatalf("ended in %v", m.State())
	}
}
