// Command leasecheck model-checks the Lease module (spec/Lease.tla) for
// given constants and prints whether TypeOK, ProcessExclusion and Handoff
// hold, with a shortest counterexample when one does not.
//
//	leasecheck -lease-span 36 -reply-max 0 [-json]
//	leasecheck -sweep [-json]
//
// Constants outside the module's ASSUME give a one-line error and exit 2.
// A property that does not hold gives exit 1.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/unitlease/unitlease/spec"
)

func main() {
	code, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasecheck:", err)
	}
	os.Exit(code)
}

func run(args []string, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("leasecheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	l := spec.Seed(36, 0)
	fs.IntVar(&l.LeaseSpan, "lease-span", l.LeaseSpan, "the constant LeaseSpan (seconds)")
	fs.IntVar(&l.ReplyMax, "reply-max", l.ReplyMax, "the constant ReplyMax, 0..20")
	fs.IntVar(&l.Retry, "retry", l.Retry, "Retry")
	fs.IntVar(&l.Renew, "renew", l.Renew, "Renew")
	fs.IntVar(&l.StopWait, "stop-wait", l.StopWait, "StopWait")
	fs.IntVar(&l.PollLow, "poll-low", l.PollLow, "PollLow")
	fs.IntVar(&l.PollHigh, "poll-high", l.PollHigh, "PollHigh")
	asJSON := fs.Bool("json", false, "print one JSON object")
	sweep := fs.Bool("sweep", false, "find the smallest safe LeaseSpan for each ReplyMax in 0..20")
	above := fs.Int("above", 10, "with -sweep, also check this many LeaseSpans above the smallest safe one")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(out)
			fs.PrintDefaults()
			return 0, nil
		}
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *sweep {
		l.LeaseSpan = 1 // any valid value; the sweep sets its own
		return runSweep(l, *above, *asJSON, out)
	}
	return runCheck(l, *asJSON, out)
}

func runCheck(l spec.Lease, asJSON bool, out io.Writer) (int, error) {
	if err := l.Validate(); err != nil {
		return 2, err
	}
	r, err := l.Check()
	if err != nil {
		return 2, err
	}
	if asJSON {
		err = writeJSON(out, r)
	} else {
		err = writeText(out, r)
	}
	if err != nil {
		return 2, err
	}
	if !r.OK() {
		return 1, nil
	}
	return 0, nil
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeText(out io.Writer, r spec.Result) error {
	fmt.Fprintf(out, "Lease with LeaseSpan=%d ReplyMax=%d Retry=%d Renew=%d StopWait=%d PollLow=%d PollHigh=%d\n",
		r.LeaseSpan, r.ReplyMax, r.Retry, r.Renew, r.StopWait, r.PollLow, r.PollHigh)
	fmt.Fprintf(out, "%d distinct states\n", r.States)
	for _, p := range []struct {
		name string
		ok   bool
	}{{"TypeOK", r.TypeOK}, {"ProcessExclusion", r.ProcessExclusion}, {"Handoff", r.Handoff}} {
		verdict := "holds"
		if !p.ok {
			verdict = "VIOLATED"
		}
		fmt.Fprintf(out, "  %-17s %s\n", p.name, verdict)
	}
	if r.Counterexample == nil {
		return nil
	}
	fmt.Fprintf(out, "counterexample for %s (%s), %d steps:\n", r.Violated, r.Kind, len(r.Counterexample))
	for i, s := range r.Counterexample {
		mark := "  "
		if r.CycleFrom != nil && i == *r.CycleFrom {
			mark = "->"
		}
		fmt.Fprintf(out, "%s %3d %-10s %v\n", mark, i, s.Action, s.State)
	}
	if r.CycleFrom != nil {
		fmt.Fprintf(out, "the steps from -> repeat forever\n")
	}
	return nil
}

func runSweep(l spec.Lease, above int, asJSON bool, out io.Writer) (int, error) {
	if err := l.Validate(); err != nil {
		return 2, err
	}
	if above < 0 {
		return 2, fmt.Errorf("-above %d is negative", above)
	}
	rows, err := spec.Sweep(l, above)
	if err != nil {
		return 2, err
	}
	if asJSON {
		return 0, writeJSON(out, rows)
	}
	fmt.Fprintf(out, "Retry=%d Renew=%d StopWait=%d PollLow=%d PollHigh=%d\n", l.Retry, l.Renew, l.StopWait, l.PollLow, l.PollHigh)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ReplyMax\tsmallest safe LeaseSpan\tholds up to\t")
	for _, r := range rows {
		holds := "yes"
		if !r.HoldsAbove {
			holds = "NO"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d: %s\t\n", r.ReplyMax, r.MinSafe, r.CheckedTo, holds)
	}
	return 0, tw.Flush()
}
