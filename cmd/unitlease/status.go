package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/unitlease/unitlease/internal/control"
)

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	var asJSON, watch bool
	fs, ok := flags("status", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON")
		fs.BoolVar(&watch, "w", false, "print again every second until interrupted")
	})
	if !ok || fs.NArg() > 0 {
		return 2
	}
	client := control.Dial(socketPath)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		snap, err := client.Status(ctx)
		cancel()
		if err != nil {
			fmt.Fprintln(stderr, "unitlease status:", err)
			return 1
		}
		if watch && !asJSON && isTerminal(stdout) {
			fmt.Fprint(stdout, "\033[H\033[2J")
		}
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(snap)
		} else {
			printStatus(stdout, snap)
		}
		if !watch {
			return 0
		}
		time.Sleep(time.Second)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// printStatus writes the tables, in the manner of `patronictl list`.
func printStatus(w io.Writer, s control.Snapshot) {
	fmt.Fprintf(w, "Node %s (lease span %v, retry %v, renew deadline %v, stop wait %v)\n",
		shown(s.Node), s.Timing.LeaseSpan, s.Timing.Retry, s.Timing.RenewDeadline, s.Timing.StopWait)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tUNIT\tNODE\tROLE\tHOLDER\tVERSION\tLEASE AGE\tDEADLINE LEFT\tUNIT STATE\tREASON")
	problem := map[string]string{} // by unit
	for _, p := range s.Problems {
		problem[p.Unit] = p.Msg
	}
	managed := map[string]bool{}
	for _, l := range s.Leases {
		for i, u := range l.Units {
			managed[u] = true
			state := "?"
			if i < len(l.UnitStates) {
				state = l.UnitStates[i]
			}
			reason := dash(l.Reason)
			switch {
			case l.Excluded:
				reason += fmt.Sprintf("; excluded here after %d failures", l.Failures)
			case l.Failures > 0:
				reason += fmt.Sprintf("; %d failures here", l.Failures)
			}
			if p, ok := problem[u]; ok {
				reason += ": " + p
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shown(l.Lease), shown(u), shown(l.Node), shown(l.Role),
				shown(dash(l.Holder)), version(l.Version), age(l), deadline(l), shown(state), shown(dash(reason)))
		}
	}
	for _, p := range s.Problems {
		if managed[p.Unit] {
			continue
		}
		role := "refused"
		if p.Kind == "annotation" {
			role = "invalid"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\t%s\n", shown(dash(p.Lease)), shown(p.Unit), shown(s.Node), role, shown(dash(p.Msg)))
	}
	if len(s.Leases) == 0 && len(s.Problems) == 0 {
		fmt.Fprintln(tw, "(no annotated units on this node: add an [X-UnitLease] section to a unit, then systemctl daemon-reload)")
	}
	tw.Flush()
	fmt.Fprintln(w, "\nCluster (Redis):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tSTATE\tHOLDER\tTOKEN\tHELD FOR\tVERSION\tWATCHERS\tNODES\tLAST TRANSITION\tFAILURES")
	for _, c := range s.Cluster {
		state := c.State
		if c.Next != "" {
			state += " to " + c.Next
		}
		heldFor := "-"
		if c.Token != 0 {
			heldFor = round(c.HeldFor)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", shown(c.Lease), shown(state), shown(dash(c.Holder)),
			version(c.Token), heldFor, version(c.Version), c.Watchers, nodes(c.Nodes), lastChange(c), failures(c.Failures))
	}
	if len(s.Cluster) == 0 {
		fmt.Fprintln(tw, "(no lease in Redis yet: a node writes a lease's key when it first acquires it)")
	}
	tw.Flush()
	if len(s.DrainedNodes) > 0 {
		fmt.Fprintln(w, "\nDrained nodes (they take no lease):", shown(strings.Join(s.DrainedNodes, ", ")))
	}
	if len(s.DisabledLeases) > 0 {
		var ds []string
		for _, x := range s.DisabledLeases {
			what := shown(x.Lease)
			if x.By != "" {
				what += " (by " + shown(x.By)
				if !x.At.IsZero() {
					what += " at " + x.At.UTC().Format(time.RFC3339)
				}
				what += ")"
			}
			ds = append(ds, what)
		}
		fmt.Fprintln(w, "Disabled leases (no node takes them until `unitlease enable`):", strings.Join(ds, ", "))
	}
	if s.Drained {
		fmt.Fprintln(w, "This node is drained: `unitlease undrain` lets it take leases again.")
	}
	for _, e := range s.Errors {
		fmt.Fprintln(w, "error:", shown(e))
	}
}

// shown is s as the terminal may print it: quoted, with escapes, when it
// holds anything but printable characters (a key name in Redis can hold
// escape sequences that would retitle or clear the terminal, or bytes
// that are not UTF-8).
func shown(s string) string {
	if !utf8.ValidString(s) { // and 0xff would be tabwriter's escape
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// age is the lease age, "-" while nothing was observed (a standby that
// has not read the record yet, a node that holds nothing).
func age(l control.LeaseStatus) string {
	if l.LeaseAge == 0 {
		return "-"
	}
	return round(l.LeaseAge)
}

func deadline(l control.LeaseStatus) string {
	if !l.Holding {
		return "-"
	}
	return round(l.DeadlineLeft)
}

// nodes is what the nodes announce of a lease: "node-b ready, node-c
// drained".
func nodes(ns []control.NodeState) string {
	if len(ns) == 0 {
		return "-"
	}
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = shown(n.Node) + " " + shown(n.State)
	}
	return strings.Join(parts, ", ")
}

// lastChange is a lease's last change: its release, for a released
// record with a note ("2026-12-01T23:38:54Z node-a released it
// (disable)"), else its last change of holder ("2026-12-01T23:38:54Z
// node-a -> node-b (drain)").
func lastChange(c control.ClusterRow) string {
	if r := c.Released; r != nil {
		return fmt.Sprintf("%s %s released it (%s)", r.At.UTC().Format(time.RFC3339), shown(r.By), shown(r.Why))
	}
	t := c.Last
	if t == nil {
		return "-"
	}
	return fmt.Sprintf("%s %s -> %s (%s)", t.At.UTC().Format(time.RFC3339), shown(cmp.Or(t.From, "none")), shown(t.To), shown(t.Why))
}

// failures is "node-a 3, node-b 1", or "-".
func failures(fs []control.NodeFailures) string {
	if len(fs) == 0 {
		return "-"
	}
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%s %d", shown(f.Node), f.Count)
	}
	return strings.Join(parts, ", ")
}

func round(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return strings.ReplaceAll(s, "\t", " ")
}

func version(v uint64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatUint(v, 10)
}
