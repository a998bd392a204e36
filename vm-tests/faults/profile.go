package main

import (
	"fmt"
	"time"

	"github.com/unitlease/unitlease/internal/daemon"
	"github.com/unitlease/unitlease/policy"
)

// profile is a timing the scenarios run with.
type profile struct {
	name   string
	t      policy.Timing // the values unitlease.toml sets (or the defaults)
	timing string        // the [timing] table; "" leaves the daemon's defaults
	dropIn string        // a drop-in of unitlease.service; "" for none
	under  time.Duration // a crash failover must take less than this; 0: no such target
}

// fastTiming is the tests' profile: the fastest timing the daemon runs
// without a warning. stop_wait may not go below 1 s (unitctl.MinStopWait:
// room for SIGTERM, then SIGKILL). The lease span covers how late a daemon
// may act before its watchdog has it killed: WatchdogSec + a third of it
// + TimeoutAbortSec + twice systemd's 250 ms timer slack
// (daemon.KillAllowance). The profile's drop-in sets WatchdogSec=450ms and
// TimeoutAbortSec=100ms (the SIGABRT goroutine dump gets less time to
// reach the journal): an allowance of 1.2 s, and a lease span of 3.007 s.
// A standby polls every 50 to 100 ms: after a crash it may see the last
// renewal up to poll_max late and then notice the lease span is over up to
// poll_max late again, so the worst crash gap is lease span + 2·poll_max +
// start, which a short poll keeps within 5% of lease span + poll_max +
// start.
var fastTiming = policy.Timing{
	Retry:         200 * time.Millisecond,
	RenewDeadline: 600 * time.Millisecond,
	StopWait:      time.Second,
	ReplyMax:      150 * time.Millisecond,
	PollMin:       50 * time.Millisecond,
	PollMax:       100 * time.Millisecond,
	Allowance:     daemon.KillAllowance(fastWatchdog, fastAbort),
}

// The fast profile's watchdog of unitlease.service.
const (
	fastWatchdog = 450 * time.Millisecond
	fastAbort    = 100 * time.Millisecond
)

var profiles = map[string]profile{
	"fast": {
		name:   "fast",
		t:      fastTiming,
		timing: timingTable(fastTiming),
		dropIn: fmt.Sprintf("[Service]\nWatchdogSec=%v\nTimeoutAbortSec=%v\n", fastWatchdog, fastAbort),
		under:  3 * time.Second,
	},
	"default": {
		name: "default",
		t:    policy.DefaultTiming(),
	},
}

// timingTable renders t as unitlease.toml's [timing] table.
func timingTable(t policy.Timing) string {
	return fmt.Sprintf("[timing]\nretry = %q\nrenew_deadline = %q\nstop_wait = %q\nreply_max = %q\npoll_min = %q\npoll_max = %q\n",
		t.Retry, t.RenewDeadline, t.StopWait, t.ReplyMax, t.PollMin, t.PollMax)
}

// The bounds on the time with no copy running. start is the new copy's
// activation as systemd ran it (from beginning the start job, the guard included,
// until the witness logged its start).
type bounds struct {
	leaseSpan, pollMax, confirm time.Duration
}

// crash: a standby waits out the lease span unchanged, notices at a poll
// and starts the unit.
func (b bounds) crash(start time.Duration) (time.Duration, string) {
	return b.leaseSpan + b.pollMax + start, fmt.Sprintf("lease span %v + poll_max %v + start %v", b.leaseSpan, b.pollMax, start.Round(time.Millisecond))
}

// missing: the key is gone (Redis lost it, or a new lease), so the node
// that acquires waits the confirm wait before it starts (rule 4).
// moved is the bound of a unit moved to a new lease: the new lease's
// standby ages the old lease's released record of the unit from when it
// reads it, up to a poll after the release (the release wakes the old
// lease's standbys, not the new one's), then as a missing key.
func (b bounds) moved(start, spread time.Duration) (time.Duration, string) {
	parts := fmt.Sprintf("lease span %v + 2 poll_max %v + confirm wait %v + start %v",
		b.leaseSpan, b.pollMax, b.confirm, start.Round(time.Millisecond))
	if spread > 0 {
		parts = fmt.Sprintf("reloads spread over %v + %s", spread.Round(time.Millisecond), parts)
	}
	return spread + b.leaseSpan + 2*b.pollMax + b.confirm + start, parts
}

func (b bounds) missing(start time.Duration) (time.Duration, string) {
	return b.leaseSpan + b.pollMax + b.confirm + start, fmt.Sprintf("lease span %v + poll_max %v + confirm wait %v + start %v",
		b.leaseSpan, b.pollMax, b.confirm, start.Round(time.Millisecond))
}

// reboot: every node down and up again, then the crash bound.
func (b bounds) reboot(reboot, start time.Duration) (time.Duration, string) {
	d, s := b.crash(start)
	return reboot + d, fmt.Sprintf("reboot %v + %s", reboot.Round(time.Millisecond), s)
}

// handoff: the unit's own stop and start.
func handoffBound(stop, start time.Duration) (time.Duration, string) {
	return stop + start, fmt.Sprintf("stop %v + start %v", stop.Round(time.Millisecond), start.Round(time.Millisecond))
}
