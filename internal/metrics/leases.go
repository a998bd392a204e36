package metrics

import (
	"cmp"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The leases' families are written at each scrape straight into the
// text format, a few kilobytes at a time, as the node's are
// (families.go): at a thousand leases the client library's data model
// cost a scrape 1.6 MB of arrays (a dto.Metric is some 200 bytes, and
// each series has one with its value and label pairs) and its encoder a
// third of the scrape's time, in checking and escaping names that are
// fixed here. The tests read the text back with the library's parser and
// hold it, byte for byte, to what the library's encoder writes of it.

// leaseFamily is one family of per-lease series: its name, help and
// type, and the series it has for a lease (none, one or one per unit).
type leaseFamily struct {
	family
	series func(w *textWriter, l *LeaseView, mt *Lease)
}

// The leases' families, sorted by name (WriteTo merges them with the
// node's, which are too). Names lists them too.
var leaseFamilies = sortedFamilies([]leaseFamily{
	{family{nameRole, "This node's role for the lease, always 1: leader (holds it), standby (may take it), none (drained, excluded, ineligible, disabled, or its stop failed after a loss). One series per lease, whose role label changes with the role.", "gauge"},
		func(w *textWriter, l *LeaseView, _ *Lease) {
			r := "none"
			switch {
			case l.Holding:
				r = "leader"
			case l.Competing:
				r = "standby"
			}
			w.series(nameRole, l.Lease, "role", r, 1)
		}},
	{family{nameToken, "The fencing token of the tenure this node holds (UNITLEASE_TOKEN); only while it holds the lease.", "gauge"},
		func(w *textWriter, l *LeaseView, _ *Lease) {
			if l.Holding {
				w.series(nameToken, l.Lease, "", "", float64(l.Token))
			}
		}},
	{family{nameAge, "Holder: time since its last successful renewal was sent. Others: how long the lease's record has been unchanged.", "gauge"},
		func(w *textWriter, l *LeaseView, _ *Lease) { w.series(nameAge, l.Lease, "", "", l.Age.Seconds()) }},
	{family{nameDeadline, "Holder: time left before it must stop the units without a renewal; only while it holds the lease.", "gauge"},
		func(w *textWriter, l *LeaseView, _ *Lease) {
			if l.Holding {
				w.series(nameDeadline, l.Lease, "", "", l.DeadlineLeft.Seconds())
			}
		}},
	// Flags that are rarely up are there only while they are: a
	// thousand leases' zeros would double what a scrape costs.
	{family{nameStopFailed, "1, only while this node could not stop the lease's units even with SIGKILL.", "gauge"},
		func(w *textWriter, l *LeaseView, _ *Lease) {
			if l.StopFailed {
				w.series(nameStopFailed, l.Lease, "", "", 1)
			}
		}},
	{family{nameDisabled, "1, only while an operator disabled the lease cluster-wide (unitlease disable).", "gauge"},
		func(w *textWriter, l *LeaseView, _ *Lease) {
			if l.Disabled {
				w.series(nameDisabled, l.Lease, "", "", 1)
			}
		}},
	{family{nameUnit, "The units of each lease managed here; always 1.", "gauge"},
		func(w *textWriter, l *LeaseView, _ *Lease) {
			for _, u := range l.Units {
				w.series(nameUnit, l.Lease, "unit", u, 1)
			}
		}},
	{family{nameAcquisitions, "Acquisitions of the lease by this node.", "counter"},
		func(w *textWriter, l *LeaseView, mt *Lease) {
			if mt != nil {
				w.series(nameAcquisitions, l.Lease, "", "", float64(mt.acquired.Load()))
			}
		}},
	{family{nameLosses, "Tenures of the lease this node lost: held elsewhere or the key missing (lost), or no renewal within renew_deadline (renew_failed); the journal says which.", "counter"},
		func(w *textWriter, l *LeaseView, mt *Lease) {
			if mt != nil {
				w.series(nameLosses, l.Lease, "", "", float64(mt.lost.Load()))
			}
		}},
	{family{nameHandoffs, "Planned handoffs of the lease (handoff, drain, failback, shutdown) this node completed: stopped, confirmed inactive, released.", "counter"},
		func(w *textWriter, l *LeaseView, mt *Lease) {
			if mt != nil {
				w.series(nameHandoffs, l.Lease, "", "", float64(mt.handedOff.Load()))
			}
		}},
})

// nameLeases, the one family of the leases' that is not per lease.
const helpLeases = "The leases this node manages."

func sortedFamilies(fs []leaseFamily) []leaseFamily {
	slices.SortFunc(fs, func(a, b leaseFamily) int { return strings.Compare(a.name, b.name) })
	return fs
}

// writeLeases writes the leases' families in the text format, sorted by
// name. Before each, it calls before with the family's name (when
// before is not nil), for the caller to write the node's families that
// sort first.
func (m *Metrics) writeLeases(w *textWriter, before func(name string)) {
	views := m.src.Leases()
	slices.SortFunc(views, func(a, b LeaseView) int { return cmp.Compare(a.Lease, b.Lease) })
	m.lmu.Lock()
	meters := make([]*Lease, len(views))
	for i, l := range views {
		meters[i] = m.leases[l.Lease]
	}
	m.lmu.Unlock()
	leasesDone := false
	writeCount := func() {
		if before != nil {
			before(nameLeases)
		}
		w.header(nameLeases, helpLeases, "gauge")
		w.series(nameLeases, "", "", "", float64(len(views)))
		leasesDone = true
	}
	for _, f := range leaseFamilies {
		if !leasesDone && nameLeases < f.name {
			writeCount()
		}
		if before != nil {
			before(f.name)
		}
		w.pending = f.family
		for i := range views {
			f.series(w, &views[i], meters[i])
		}
		w.pending = family{}
	}
	if !leasesDone {
		writeCount()
	}
}

// textWriter writes series in the text exposition format (version
// 0.0.4) to w, through a buffer of its own it flushes every
// flushAt bytes. The family in pending gets its HELP and TYPE lines
// before its first series, so a family with no series is not written.
type textWriter struct {
	w       io.Writer
	b       []byte
	n       int64 // written to w
	err     error
	pending family
}

const flushAt = 16 << 10

func (t *textWriter) header(name, help, typ string) {
	t.b = append(t.b, "# HELP "...)
	t.b = append(t.b, name...)
	t.b = append(t.b, ' ')
	t.b = appendEscaped(t.b, help, false)
	t.b = append(t.b, "\n# TYPE "...)
	t.b = append(t.b, name...)
	t.b = append(t.b, ' ')
	t.b = append(t.b, typ...)
	t.b = append(t.b, '\n')
}

// series writes name{lease="lease",label="value"} v: the lease label
// when lease is not empty, the second when label is not.
func (t *textWriter) series(name, lease, label, value string, v float64) {
	k := ""
	if lease != "" {
		k = "lease"
	}
	t.sample(name, "", k, lease, label, value, v)
}

// sample writes name+suffix{k1="v1",k2="v2"} v, each label whose name is
// not empty, in this order: label names sorted, as the client library
// writes them.
func (t *textWriter) sample(name, suffix, k1, v1, k2, v2 string, v float64) {
	if t.pending.name != "" {
		t.header(t.pending.name, t.pending.help, t.pending.typ)
		t.pending = family{}
	}
	t.b = append(t.b, name...)
	t.b = append(t.b, suffix...)
	sep := byte('{')
	for _, l := range [2][2]string{{k1, v1}, {k2, v2}} {
		if l[0] == "" {
			continue
		}
		t.b = append(t.b, sep)
		t.b = append(t.b, l[0]...)
		t.b = append(t.b, `="`...)
		t.b = appendEscaped(t.b, l[1], true)
		t.b = append(t.b, '"')
		sep = ','
	}
	if sep == ',' {
		t.b = append(t.b, '}')
	}
	t.b = append(t.b, ' ')
	t.b = appendFloat(t.b, v)
	t.b = append(t.b, '\n')
	if len(t.b) >= flushAt {
		t.flush()
	}
}

// flush writes what is buffered; the first error stays, and what comes
// after it is dropped.
func (t *textWriter) flush() error {
	if t.err == nil && len(t.b) > 0 {
		var n int
		n, t.err = t.w.Write(t.b)
		t.n += int64(n)
	}
	t.b = t.b[:0]
	return t.err
}

// appendEscaped escapes as the text format does: a backslash and a line
// feed in a HELP line, and the double quote too in a label value.
func appendEscaped(b []byte, s string, quote bool) []byte {
	special := "\\\n"
	if quote {
		special = "\\\n\""
	}
	if !strings.ContainsAny(s, special) {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat writes a value as the client library's encoder does.
func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
