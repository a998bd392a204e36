// Command leasecheck model-checks the Lease module (spec/Lease.tla), or
// with -failover the LeaseFailover module (spec/LeaseFailover.tla), for
// given constants and prints whether TypeOK, ProcessExclusion and Handoff
// hold, with a shortest counterexample when one does not.
//
//	leasecheck -lease-span 36 -reply-max 0 [-json]
//	leasecheck -sweep [-json]
//	leasecheck -failover [-rule=false] [-max-lag 10] [-detect 10] [-hazard released|held] [-json]
//	leasecheck -failover -sweep [-detects 0,5,10,15,20] [-json]
//
// Times are in seconds. Constants outside the module's ASSUME give a
// one-line error and exit 2. A property that does not hold, or a failover
// sweep that disagrees with the law, gives exit 1.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
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
	failover := fs.Bool("failover", false, "check LeaseFailover.tla instead (ReplyMax 0)")
	rule := fs.Bool("rule", true, "with -failover, the constant Rule: the server identity rule")
	maxLag := fs.Int("max-lag", 10, "with -failover, the constant MaxLag (seconds)")
	detect := fs.Int("detect", 10, "with -failover, the constant Detect (seconds)")
	hazard := fs.String("hazard", "", "with -failover, show the shortest counterexample whose new master holds a released or a held record")
	detects := fs.String("detects", "0,5,10,15,20", "with -failover -sweep, the Detects to sweep")
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
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *failover {
		if set["reply-max"] || set["above"] {
			return 2, errors.New("-reply-max and -above have no meaning with -failover (its ReplyMax is 0)")
		}
		f := spec.Failover{
			LeaseSpan: l.LeaseSpan, MaxLag: *maxLag, Detect: *detect, Rule: *rule,
			Retry: l.Retry, Renew: l.Renew, StopWait: l.StopWait, PollLow: l.PollLow, PollHigh: l.PollHigh,
		}
		if *sweep {
			if set["max-lag"] || set["detect"] || set["rule"] || set["hazard"] {
				return 2, errors.New("-failover -sweep sets MaxLag, Detect and Rule itself; give -detects")
			}
			return runFailoverSweep(f, *detects, *asJSON, out)
		}
		if set["detects"] {
			return 2, errors.New("-detects needs -sweep")
		}
		return runFailover(f, *hazard, *asJSON, out)
	}
	for _, name := range []string{"rule", "max-lag", "detect", "hazard", "detects"} {
		if set[name] {
			return 2, fmt.Errorf("-%s needs -failover", name)
		}
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
	writeVerdicts(out, r.States, r.TypeOK, r.ProcessExclusion, r.Handoff)
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

func writeVerdicts(out io.Writer, states int, typeOK, exclusion, handoff bool) {
	fmt.Fprintf(out, "%d distinct states\n", states)
	for _, p := range []struct {
		name string
		ok   bool
	}{{"TypeOK", typeOK}, {"ProcessExclusion", exclusion}, {"Handoff", handoff}} {
		verdict := "holds"
		if !p.ok {
			verdict = "VIOLATED"
		}
		fmt.Fprintf(out, "  %-17s %s\n", p.name, verdict)
	}
}

// failoverReport is what -failover -json prints: the result, the time of
// each counterexample step (the module's clock restarts at the cut), and
// the largest MaxLag the law allows with these constants.
type failoverReport struct {
	spec.FailoverResult
	Times     []int `json:"counterexample_times,omitempty"`
	LawMaxLag int   `json:"law_max_lag"`
}

func runFailover(f spec.Failover, hazard string, asJSON bool, out io.Writer) (int, error) {
	if err := f.Validate(); err != nil {
		return 2, err
	}
	if hazard != "" && hazard != spec.HazardReleased && hazard != spec.HazardHeld {
		return 2, fmt.Errorf("-hazard %q: want %s or %s", hazard, spec.HazardReleased, spec.HazardHeld)
	}
	r, err := f.Check()
	if err != nil {
		return 2, err
	}
	note := ""
	if hazard != "" && !r.ProcessExclusion {
		steps, err := f.Hazard(hazard)
		if err != nil {
			return 2, err
		}
		r.Violated, r.Kind, r.CycleFrom, r.Counterexample = "ProcessExclusion", spec.KindInvariant, nil, steps
		if steps == nil {
			note = fmt.Sprintf("no counterexample whose new master holds a %s record\n", hazard)
		}
	}
	rep := failoverReport{FailoverResult: r, Times: spec.FailoverTimes(r.Counterexample), LawMaxLag: f.SafeMaxLag()}
	if asJSON {
		err = writeJSON(out, rep)
	} else {
		err = writeFailoverText(out, rep)
		fmt.Fprint(out, note)
	}
	if err != nil {
		return 2, err
	}
	if !r.OK() {
		return 1, nil
	}
	return 0, nil
}

func writeFailoverText(out io.Writer, r failoverReport) error {
	fmt.Fprintf(out, "LeaseFailover with LeaseSpan=%d MaxLag=%d Detect=%d Rule=%t Retry=%d Renew=%d StopWait=%d PollLow=%d PollHigh=%d (seconds)\n",
		r.LeaseSpan, r.MaxLag, r.Detect, r.Rule, r.Retry, r.Renew, r.StopWait, r.PollLow, r.PollHigh)
	writeVerdicts(out, r.States, r.TypeOK, r.ProcessExclusion, r.Handoff)
	fmt.Fprintf(out, "law: %s\n", lawText(r.Failover))
	if r.Counterexample == nil {
		return nil
	}
	fmt.Fprintf(out, "counterexample for %s (%s), %d steps (t: seconds since Init):\n", r.Violated, r.Kind, len(r.Counterexample))
	for i, s := range r.Counterexample {
		mark := "  "
		if r.CycleFrom != nil && i == *r.CycleFrom {
			mark = "->"
		}
		fmt.Fprintf(out, "%s %3d t=%-3d %-10s %v\n", mark, i, r.Times[i], s.Action, s.State)
	}
	if r.CycleFrom != nil {
		fmt.Fprintf(out, "the steps from -> repeat forever\n")
	}
	return nil
}

// lawText states the law for f's constants with its numbers.
func lawText(f spec.Failover) string {
	bound := f.Retry + f.Renew + f.StopWait + 1
	verdict := "safe"
	if f.MaxLag > f.SafeMaxLag() {
		verdict = "unsafe"
	}
	switch {
	case f.LeaseSpan < bound:
		return fmt.Sprintf("LeaseSpan %d < Retry+Renew+StopWait+1 = %d: unsafe without any failover (Lease.tla)", f.LeaseSpan, bound)
	case f.Rule:
		return fmt.Sprintf("MaxLag <= Detect + LeaseSpan - (Retry+Renew+StopWait+1): %d <= %d + %d - %d = %d: %s",
			f.MaxLag, f.Detect, f.LeaseSpan, bound, f.Detect+f.LeaseSpan-bound, verdict)
	default:
		return fmt.Sprintf("without the rule, MaxLag + Retry+Renew+StopWait+1 <= Detect: %d + %d <= %d: %s",
			f.MaxLag, bound, f.Detect, verdict)
	}
}

func runFailoverSweep(f spec.Failover, list string, asJSON bool, out io.Writer) (int, error) {
	var detects []int
	for _, field := range strings.Split(list, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil {
			return 2, fmt.Errorf("-detects %q: %w", list, err)
		}
		detects = append(detects, d)
	}
	for _, d := range detects {
		g := f
		g.Detect = d
		if err := g.Validate(); err != nil {
			return 2, err
		}
	}
	rows, err := spec.FailoverSweep(f, detects)
	if err != nil {
		return 2, err
	}
	code := 0
	for _, r := range rows {
		if !r.OK() {
			code = 1
		}
	}
	if asJSON {
		return code, writeJSON(out, rows)
	}
	bound := f.Retry + f.Renew + f.StopWait + 1
	fmt.Fprintf(out, "LeaseSpan=%d Retry=%d Renew=%d StopWait=%d PollLow=%d PollHigh=%d (seconds)\n",
		f.LeaseSpan, f.Retry, f.Renew, f.StopWait, f.PollLow, f.PollHigh)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "Detect\tlargest safe MaxLag, rule\tlaw\twithout the rule\tlaw\t")
	for _, r := range rows {
		agrees := ""
		if !r.OK() {
			agrees = "  DISAGREES"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Detect, lag(r.MaxSafe), lag(r.Law), lag(r.MaxSafeWithoutRule), lag(r.LawWithoutRule), agrees)
	}
	if err := tw.Flush(); err != nil {
		return 2, err
	}
	fmt.Fprintf(out, "with the rule:    ProcessExclusion iff MaxLag <= Detect + LeaseSpan - (Retry+Renew+StopWait+1) = Detect + %d\n", f.LeaseSpan-bound)
	fmt.Fprintf(out, "without the rule: ProcessExclusion iff MaxLag <= Detect - (Retry+Renew+StopWait+1) = Detect - %d\n", bound)
	if code != 0 {
		fmt.Fprintln(out, "the model disagrees with the law")
	}
	return code, nil
}

func lag(v int) string {
	if v < 0 {
		return "none"
	}
	return strconv.Itoa(v)
}
