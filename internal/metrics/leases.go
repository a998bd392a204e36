package metrics

import (
	"cmp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The leases' families are built at each scrape as the client library's
// own data model (client_model's MetricFamily), handed to its encoder
// with the registry's families, rather than as a const metric per series
// through the registry: at a thousand leases that path cost a scrape
// about 550 bytes and a dozen allocations per series (the metric, its
// sorted label pairs, the registry's copy, its consistency hash), 4.5 MB
// of garbage for every scrape, which a daemon at half the default GC
// target paid for again in collections. Here a family's series share
// their backing arrays (a few allocations per family), and the label
// pair that names a lease is one for all its families: what
// kube-state-metrics does for its per-object series, within the library.

// gatherer serves the registry's families and the leases'.
type gatherer struct{ m *Metrics }

func (g gatherer) Gather() ([]*dto.MetricFamily, error) {
	fams, err := g.m.reg.Gather()
	fams = append(fams, g.m.leaseFamilies()...)
	slices.SortFunc(fams, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return fams, err
}

var _ prometheus.Gatherer = gatherer{}

// The leases' families: name, help, type. Names lists them too.
var leaseFamilies = []struct {
	name, help string
	typ        dto.MetricType
}{
	{nameRole, "This node's role for the lease, always 1: leader (holds it), standby (may take it), none (drained, excluded, ineligible, disabled, or its stop failed after a loss). One series per lease, whose role label changes with the role.", dto.MetricType_GAUGE},
	{nameToken, "The fencing token of the tenure this node holds (UNITLEASE_TOKEN); only while it holds the lease.", dto.MetricType_GAUGE},
	{nameAge, "Holder: time since its last successful renewal was sent. Others: how long the lease's record has been unchanged.", dto.MetricType_GAUGE},
	{nameDeadline, "Holder: time left before it must stop the units without a renewal; only while it holds the lease.", dto.MetricType_GAUGE},
	{nameStopFailed, "1, only while this node could not stop the lease's units even with SIGKILL.", dto.MetricType_GAUGE},
	{nameDisabled, "1, only while an operator disabled the lease cluster-wide (unitlease disable).", dto.MetricType_GAUGE},
	{nameUnit, "The units of each lease managed here; always 1.", dto.MetricType_GAUGE},
	{nameAcquisitions, "Acquisitions of the lease by this node.", dto.MetricType_COUNTER},
	{nameLosses, "Tenures of the lease this node lost: held elsewhere or the key missing (lost), or no renewal within renew_deadline (renew_failed); the journal says which.", dto.MetricType_COUNTER},
	{nameHandoffs, "Planned handoffs of the lease (handoff, drain, failback, shutdown) this node completed: stopped, confirmed inactive, released.", dto.MetricType_COUNTER},
	{nameLeases, "The leases this node manages.", dto.MetricType_GAUGE},
}

// Label names and the role label's values, shared by every series.
var (
	labelLease, labelUnit = ptr("lease"), ptr("unit")
	roleLabels            = map[string]*dto.LabelPair{}
)

func init() {
	for _, r := range []string{"leader", "standby", "none"} {
		roleLabels[r] = &dto.LabelPair{Name: ptr("role"), Value: ptr(r)}
	}
}

func ptr[T any](v T) *T { return &v }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// family collects one family's series, in arrays sized once.
type family struct {
	f      *dto.MetricFamily
	ms     []dto.Metric
	vals   []float64
	gauges []dto.Gauge
	counts []dto.Counter
	labels []*dto.LabelPair
}

func newFamily(i, capacity, labelsEach int) *family {
	d := leaseFamilies[i]
	f := &family{f: &dto.MetricFamily{Name: ptr(d.name), Help: ptr(d.help), Type: d.typ.Enum()},
		ms: make([]dto.Metric, 0, capacity), vals: make([]float64, 0, capacity),
		labels: make([]*dto.LabelPair, 0, capacity*labelsEach)}
	if d.typ == dto.MetricType_COUNTER {
		f.counts = make([]dto.Counter, 0, capacity)
	} else {
		f.gauges = make([]dto.Gauge, 0, capacity)
	}
	f.f.Metric = make([]*dto.Metric, 0, capacity)
	return f
}

// add appends a series. Its arrays never grow past their capacity, so
// the pointers into them stay valid; past it, they would be copied.
func (f *family) add(v float64, labels ...*dto.LabelPair) {
	if len(f.ms) == cap(f.ms) || len(f.labels)+len(labels) > cap(f.labels) {
		panic("metrics: a family outgrew its arrays")
	}
	f.vals = append(f.vals, v)
	start := len(f.labels)
	f.labels = append(f.labels, labels...)
	f.ms = append(f.ms, dto.Metric{})
	m := &f.ms[len(f.ms)-1]
	m.Label = f.labels[start:len(f.labels):len(f.labels)]
	val := &f.vals[len(f.vals)-1]
	if f.counts != nil {
		f.counts = append(f.counts, dto.Counter{Value: val})
		m.Counter = &f.counts[len(f.counts)-1]
	} else {
		f.gauges = append(f.gauges, dto.Gauge{Value: val})
		m.Gauge = &f.gauges[len(f.gauges)-1]
	}
	f.f.Metric = append(f.f.Metric, m)
}

// leaseFamilies reads the leases from the source and the meters, and
// returns their families, leaving out those without a series.
func (m *Metrics) leaseFamilies() []*dto.MetricFamily {
	views := m.src.Leases()
	slices.SortFunc(views, func(a, b LeaseView) int { return cmp.Compare(a.Lease, b.Lease) })
	m.lmu.Lock()
	meters := make([]*Lease, len(views))
	for i, l := range views {
		meters[i] = m.leases[l.Lease]
	}
	m.lmu.Unlock()
	// Each family's arrays, sized once: most leases are held or not, few
	// have a flag up, and a lease may have a meter or not.
	n, units, held, failed, off, metered := len(views), 0, 0, 0, 0, 0
	for i, l := range views {
		units += len(l.Units)
		held += b2i(l.Holding)
		failed += b2i(l.StopFailed)
		off += b2i(l.Disabled)
		metered += b2i(meters[i] != nil)
	}
	role, token, age, deadline := newFamily(0, n, 2), newFamily(1, held, 1), newFamily(2, n, 1), newFamily(3, held, 1)
	stopFailed, disabled, unit := newFamily(4, failed, 1), newFamily(5, off, 1), newFamily(6, units, 2)
	acquired, lost, handedOff := newFamily(7, metered, 1), newFamily(8, metered, 1), newFamily(9, metered, 1)
	leaseLabels := make([]dto.LabelPair, n)
	unitLabels := make([]dto.LabelPair, 0, units)
	for i, l := range views {
		lease := &leaseLabels[i]
		lease.Name, lease.Value = labelLease, &views[i].Lease
		r := "none"
		switch {
		case l.Holding:
			r = "leader"
		case l.Competing:
			r = "standby"
		}
		role.add(1, lease, roleLabels[r])
		if l.Holding {
			token.add(float64(l.Token), lease)
			deadline.add(l.DeadlineLeft.Seconds(), lease)
		}
		age.add(l.Age.Seconds(), lease)
		// Flags that are rarely up are there only while they are: a
		// thousand leases' zeros would double what a scrape costs.
		if l.StopFailed {
			stopFailed.add(1, lease)
		}
		if l.Disabled {
			disabled.add(1, lease)
		}
		for j := range l.Units {
			unitLabels = append(unitLabels, dto.LabelPair{Name: labelUnit, Value: &views[i].Units[j]})
			unit.add(1, lease, &unitLabels[len(unitLabels)-1])
		}
		if mt := meters[i]; mt != nil {
			acquired.add(float64(mt.acquired.Load()), lease)
			lost.add(float64(mt.lost.Load()), lease)
			handedOff.add(float64(mt.handedOff.Load()), lease)
		}
	}
	count := newFamily(10, 1, 0)
	count.add(float64(n))
	var out []*dto.MetricFamily
	for _, f := range []*family{role, token, age, deadline, stopFailed, disabled, unit, acquired, lost, handedOff, count} {
		if len(f.f.Metric) > 0 {
			out = append(out, f.f)
		}
	}
	return out
}
