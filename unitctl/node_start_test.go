package unitctl

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestNodeStartFailureReturnsError: a unit that fails to start returns a
// *JobError with systemd's job result and the service's Result=.
func TestNodeStartFailureReturnsError(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	cases := []struct {
		name, service     string
		jobResult, result string
	}{
		{"ExecStart fails", "Type=oneshot\nRemainAfterExit=yes\nExecStart=/bin/false\n", "failed", "exit-code"},
		{"ExecStartPre fails", "ExecStartPre=/bin/sh -c 'exit 3'\nExecStart=/bin/sleep infinity\n", "failed", "exit-code"},
		{"executable missing", "Type=exec\nExecStart=/nonexistent/daemon\n", "failed", "exit-code"},
		{"start times out", "Type=notify\nExecStart=/bin/sleep infinity\nTimeoutStartSec=300ms\n", "failed", "timeout"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			unit := fmt.Sprintf("ul-start-fail-%d.service", i)
			installUnits(t, map[string]string{unit: "[Service]\n" + c.service})
			err := s.Start(ctxFor(t, 10*time.Second), unit)
			var je *JobError
			if !errors.Is(err, ErrStartFailed) || !errors.As(err, &je) {
				t.Fatalf("Start = %v, want ErrStartFailed", err)
			}
			t.Logf("Start: %v", err)
			if je.JobResult != c.jobResult || je.Result != c.result || je.State.ActiveState != "failed" {
				t.Errorf("job %q, result %q, state %s; want job %q, result %q, failed", je.JobResult, je.Result, je.State, c.jobResult, c.result)
			}
		})
	}
}

// TestNodeStartOrder: a group's units come in systemd's order (After=,
// and Before= seen from the other side), not their names'.
func TestNodeStartOrder(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	installUnits(t, map[string]string{
		"ul-order-a.service": "[Unit]\nAfter=ul-order-c.service\n[Service]\nExecStart=/bin/sleep infinity\n",
		"ul-order-b.service": "[Unit]\nBefore=ul-order-c.service\n[Service]\nExecStart=/bin/sleep infinity\n",
		"ul-order-c.service": "[Service]\nExecStart=/bin/sleep infinity\n",
	})
	got, err := s.StartOrder(ctxFor(t, 10*time.Second), []string{"ul-order-a.service", "ul-order-b.service", "ul-order-c.service"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ul-order-b.service", "ul-order-c.service", "ul-order-a.service"}; !slices.Equal(got, want) {
		t.Fatalf("StartOrder = %v, want %v", got, want)
	}
}

// TestNodeStartReadsAtJobEnd: systemd sends the Job property with every
// change of a unit, so a start with a process before its main one (as
// the guard) reads the state after its StartUnit and at its job's end,
// not again for each change while the job runs (ExecStartPre, then
// ExecStart). Before, each start read three or four times.
func TestNodeStartReadsAtJobEnd(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{PollInterval: time.Hour}) // reads only when a change or the job result asks
	unit := "ul-start-reads.service"
	installUnits(t, map[string]string{unit: "[Unit]\nStartLimitIntervalSec=0\n[Service]\nExecStartPre=/bin/true\nExecStart=/bin/sleep infinity\n"})
	probe := s.watchers.add(unit)
	defer s.watchers.remove(probe)
	const starts = 10
	var total int64
	for i := range starts {
		drain(probe.changes)
		before := s.reads.calls.Load()
		if err := s.Start(ctxFor(t, 10*time.Second), unit); err != nil {
			t.Fatal(err)
		}
		reads := s.reads.calls.Load() - before
		total += reads
		var changes, withJob int
		for len(probe.changes) > 0 {
			changes++
			if showsJob(<-probe.changes) {
				withJob++
			}
		}
		t.Logf("start %d: %d reads, %d changes of which %d showed the job", i, reads, changes, withJob)
		if withJob == 0 {
			t.Fatalf("start %d: none of its %d changes showed its job queued", i, changes)
		}
		if err := s.Stop(ctxFor(t, 10*time.Second), unit, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Two each; a late change of the stop before, showing no job, may
	// add one now and then.
	if total > starts*5/2 {
		t.Fatalf("%d starts read the state %d times; want about 2 each: after StartUnit, and at the job's end", starts, total)
	}
}

// TestNodeStartQueued: 24 starts queued at once, a few with a process
// before their main one and one that fails, each report what Start
// would: the units that start are active, the failing one is a
// *JobError with systemd's result; no start place stays held.
func TestNodeStartQueued(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	units := map[string]string{}
	for i := range 24 {
		service := "[Service]\nExecStart=/bin/sleep infinity\n"
		if i%4 == 0 {
			service = "[Service]\nExecStartPre=/bin/true\nExecStart=/bin/sleep infinity\n"
		}
		if i == 7 {
			service = "[Service]\nExecStartPre=/bin/false\nExecStart=/bin/sleep infinity\n"
		}
		units[fmt.Sprintf("ul-queued-%02d.service", i)] = service
	}
	installUnits(t, units)
	type result struct {
		unit string
		err  error
	}
	results := make(chan result, len(units))
	ctx := ctxFor(t, 60*time.Second)
	for u := range units {
		s.StartQueued(ctx, u, func(err error) { results <- result{u, err} })
	}
	for range units {
		r := <-results
		if r.unit == "ul-queued-07.service" {
			var je *JobError
			if !errors.Is(r.err, ErrStartFailed) || !errors.As(r.err, &je) || je.JobResult != "failed" {
				t.Errorf("%s: %v, want ErrStartFailed with job result failed", r.unit, r.err)
			}
			continue
		}
		if r.err != nil {
			t.Errorf("%s: %v", r.unit, r.err)
			continue
		}
		if st, err := s.State(ctx, r.unit); err != nil || !st.Running() {
			t.Errorf("%s reported started, and is %v (%v)", r.unit, st, err)
		}
	}
	if !poolsEmpty(s, 5*time.Second) {
		t.Errorf("%d start places held after every queued start reported", len(s.startCalls))
	}
}
