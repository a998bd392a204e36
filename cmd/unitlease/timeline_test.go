package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/policy"
)

// TestCrashFailoverBoundHoldsForThePolicy: the crash failover bound
// check prints holds for a standby policy.Machine whose every reply takes
// reply_max, for both profiles, over 300 poll jitters. (It once printed
// lease span + 2 x poll_max, which a slow Redis broke by seconds: every
// observation costs a reply too, and the acquisition one more.)
func TestCrashFailoverBoundHoldsForThePolicy(t *testing.T) {
	for _, profile := range []string{"quick", "default"} {
		t.Run(profile, func(t *testing.T) {
			cfg, err := config.Parse("u.toml", []byte("node = \"n1\"\n[timing]\nprofile = \""+profile+"\"\n"))
			if err != nil {
				t.Fatal(err)
			}
			tm := cfg.Timing
			bound := CrashBound(tm)
			var out bytes.Buffer
			(&checker{out: &out}).timeline(cfg)
			if !strings.Contains(out.String(), "= "+bound.String()) {
				t.Fatalf("check's timeline does not print the bound %v:\n%s", bound, out.String())
			}
			var worst time.Duration
			for seed := uint64(1); seed <= 300; seed++ {
				worst = max(worst, crashFailover(t, tm, seed))
			}
			if worst > bound {
				t.Errorf("profile %s: a standby whose replies take reply_max %v acquires %v after the holder's last renewal; check prints the bound %v",
					profile, tm.ReplyMax, worst, bound)
			}
			t.Logf("profile %s: worst %v, bound %v", profile, worst, bound)
		})
	}
}

// crashFailover runs one standby against a holder whose last renewal
// commits just after a read the standby sent (whose reply still shows the
// renewal before), every reply arriving reply_max after its request. It
// returns the time from that last renewal to the AcquireOK's receipt.
func crashFailover(t *testing.T, tm policy.Timing, seed uint64) time.Duration {
	t.Helper()
	m, err := policy.New(policy.Config{Timing: tm, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(v uint64) policy.Record {
		return policy.Record{Present: true, Raw: fmt.Sprintf("held-by-b-v%d", v), Holder: "b", Token: "tok", Version: v, LeaseSpan: tm.LeaseSpan}
	}
	type pending struct {
		at policy.Instant
		ev policy.Event
	}
	const warmup = policy.Instant(20 * time.Second)
	crash := policy.Never
	var queue []pending
	var out policy.Output
	now := policy.Instant(0)
	m, out = m.Step(now, policy.Event{Kind: policy.Tick})
	for range 100000 {
		for a := range out.Actions() {
			switch a.Kind {
			case policy.StopUnit:
				queue = append(queue, pending{now, policy.Event{Kind: policy.UnitStopped}})
			case policy.Observe:
				// The holder renews every retry until its last renewal,
				// which commits right after the first read past warmup.
				if crash == policy.Never && now >= warmup {
					crash = now + 1
				}
				r := rec(uint64(crash)/uint64(tm.Retry) + 2)
				if now < crash {
					r = rec(uint64(now)/uint64(tm.Retry) + 1)
				}
				queue = append(queue, pending{now.Add(tm.ReplyMax), policy.Event{Kind: policy.Observed, Record: r}})
			case policy.Acquire:
				if crash == policy.Never {
					t.Fatalf("seed %d: acquired before the holder stopped renewing", seed)
				}
				return time.Duration(now.Add(tm.ReplyMax) - crash)
			default:
				t.Fatalf("unexpected action %v", a)
			}
		}
		next, ev := out.Wake, policy.Event{Kind: policy.Tick}
		if len(queue) > 0 && queue[0].at <= next {
			next, ev = queue[0].at, queue[0].ev
			queue = queue[1:]
		}
		if next == policy.Never {
			t.Fatalf("seed %d: the machine waits for nothing in %v", seed, m.State())
		}
		now = max(now, next)
		m, out = m.Step(now, ev)
	}
	t.Fatalf("seed %d: no acquisition", seed)
	return 0
}
