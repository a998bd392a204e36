package main

import (
	"strings"
	"testing"

	"github.com/unitlease/unitlease/internal/control"
)

// FuzzPrintStatus: whatever names and messages the snapshot carries (key
// names and values from Redis among them), status prints no control
// character but the line ends, and one line per row.
func FuzzPrintStatus(f *testing.F) {
	f.Add("web", "node-a", "db.service", "redislease: key k: bad")
	f.Add("evil\x1b]0;t\x07", "a\nb", "u\r\x00", "x\x1b[2J\ny")
	f.Fuzz(func(t *testing.T, lease, holder, unit, msg string) {
		var b strings.Builder
		printStatus(&b, control.Snapshot{Node: holder,
			Leases:  []control.LeaseStatus{{Lease: lease, Units: []string{unit}, Node: holder, Role: "standby", Holder: holder, Reason: msg}},
			Cluster: []control.ClusterRow{{Lease: lease, State: "held", Holder: holder}},
			Errors:  []string{msg}})
		out := b.String()
		for _, r := range out {
			if r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r < 0xa0 {
				t.Fatalf("control character %U in:\n%q", r, out)
			}
		}
		// Node line, leases header and row, blank, "Cluster", header and
		// row, the error: 8 lines.
		if n := strings.Count(out, "\n"); n != 8 && !strings.ContainsAny(holder, "\n\r") {
			t.Fatalf("%d lines:\n%s", n, out)
		}
	})
}
