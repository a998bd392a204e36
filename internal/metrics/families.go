package metrics

import (
	"context"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The node's families are written by hand in the text format, as the
// leases' are (leases.go), not through Prometheus's client library: its
// registry, its Go and process collectors and what they build on (its
// data model, expfmt, procfs, protobuf) were 1.8 MB of the binary's
// code, read-only data and line tables, resident in every daemon. The
// Go runtime's and the process's series are a subset of the library's,
// under its names, with its help texts and types, so that dashboards
// built on them keep working; the runtime's are read through
// runtime/metrics (and the GC's pauses through debug.ReadGCStats), which
// do not stop the world, as runtime.ReadMemStats does.

// counter is a node's counter.
type counter struct{ n atomic.Uint64 }

func (c *counter) Inc()         { c.n.Add(1) }
func (c *counter) Load() uint64 { return c.n.Load() }

// histogram counts observations into fixed buckets. A mutex rather than
// atomics: there are two, by node, and a scrape reads buckets, sum and
// count that agree.
type histogram struct {
	bounds []float64 // upper bounds, ascending; +Inf is implied
	les    []string  // the bounds' le labels, as the text format writes them

	mu     sync.Mutex
	counts []uint64 // not cumulative; counts[len(bounds)] is above the last bound; guarded by mu
	sum    float64  // guarded by mu
}

func newHistogram(bounds []float64) *histogram {
	h := &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
	for _, b := range bounds {
		h.les = append(h.les, string(appendFloat(nil, b)))
	}
	return h
}

// Observe counts v in the first bucket whose upper bound is at least v,
// as the client library does.
func (h *histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.mu.Unlock()
}

// snapshot returns the cumulative counts (the last is the count) and the
// sum.
func (h *histogram) snapshot() (cum []uint64, sum float64) {
	cum = make([]uint64, len(h.counts))
	h.mu.Lock()
	copy(cum, h.counts)
	sum = h.sum
	h.mu.Unlock()
	for i := 1; i < len(cum); i++ {
		cum[i] += cum[i-1]
	}
	return cum, sum
}

// write writes the series of the histogram named name: the cumulative
// buckets, +Inf's last, the sum and the count.
func (h *histogram) write(w *textWriter, name string) {
	cum, sum := h.snapshot()
	for i, le := range h.les {
		w.sample(name, "_bucket", "le", le, "", "", float64(cum[i]))
	}
	count := float64(cum[len(cum)-1])
	w.sample(name, "_bucket", "le", "+Inf", "", "", count)
	w.sample(name, "_sum", "", "", "", "", sum)
	w.sample(name, "_count", "", "", "", "", count)
}

// family is a family's name, help and type.
type family struct{ name, help, typ string }

// nodeFamily is one of the node's families: one series, value's (none if
// value says so), or what write writes. WriteTo writes its HELP and TYPE
// before its first series.
type nodeFamily struct {
	family
	value func(m *Metrics, r *reading) (float64, bool)
	write func(w *textWriter, m *Metrics, r *reading)
}

// procStats are the process's figures a scrape serves; the ones not read
// are not served, and the scrape goes on. Only Linux reads them.
type procStats struct {
	cpuSeconds, rss, vsize float64
	statOK                 bool
	startTime              float64
	startTimeOK            bool
	openFDs                float64
	openFDsOK              bool
	maxFDs                 float64
	maxFDsOK               bool
	maxVsize               float64
	maxVsizeOK             bool
}

// reading is what a scrape reads at its start, besides the leases.
type reading struct {
	redisUp, redisDurable, drained bool

	goroutines, threads int
	rt                  []rtmetrics.Sample // rtSamples' values
	gc                  debug.GCStats

	proc procStats
}

// read reads the node: Redis's two probes at once (each waits at most
// reply_max, as the store bounds its requests, so a Redis that does not
// answer costs a scrape reply_max, not twice that), the runtime and the
// process.
func (m *Metrics) read() reading {
	var r reading
	r.goroutines = runtime.NumGoroutine() // the probes' not counted
	r.threads, _ = runtime.ThreadCreateProfile(nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() { r.redisUp = m.src.RedisUp(ctx) })
	wg.Go(func() { r.redisDurable = m.redisDurable(ctx) })
	r.rt = make([]rtmetrics.Sample, len(rtSamples))
	for i, name := range rtSamples {
		r.rt[i].Name = name
	}
	rtmetrics.Read(r.rt)
	r.gc.PauseQuantiles = make([]time.Duration, len(gcQuantiles))
	debug.ReadGCStats(&r.gc)
	r.proc = m.readProc()
	wg.Wait()
	r.drained = m.src.Drained()
	return r
}

// The runtime/metrics samples a scrape reads, by index.
const (
	rtHeapObjectsBytes = iota
	rtHeapUnusedBytes
	rtStacksBytes
	rtTotalBytes
	rtHeapGoal
	rtAllocsBytes
	rtHeapObjects
	rtGOGC
	rtMemLimit
	rtGOMAXPROCS
)

var rtSamples = []string{
	rtHeapObjectsBytes: "/memory/classes/heap/objects:bytes",
	rtHeapUnusedBytes:  "/memory/classes/heap/unused:bytes",
	rtStacksBytes:      "/memory/classes/heap/stacks:bytes",
	rtTotalBytes:       "/memory/classes/total:bytes",
	rtHeapGoal:         "/gc/heap/goal:bytes",
	rtAllocsBytes:      "/gc/heap/allocs:bytes",
	rtHeapObjects:      "/gc/heap/objects:objects",
	rtGOGC:             "/gc/gogc:percent",
	rtMemLimit:         "/gc/gomemlimit:bytes",
	rtGOMAXPROCS:       "/sched/gomaxprocs:threads",
}

// rt returns the sum of the samples at is; none if the runtime has one of
// them not.
func rt(is ...int) func(*Metrics, *reading) (float64, bool) {
	return func(_ *Metrics, r *reading) (float64, bool) {
		var v float64
		for _, i := range is {
			switch s := r.rt[i]; s.Value.Kind() {
			case rtmetrics.KindUint64:
				v += float64(s.Value.Uint64())
			case rtmetrics.KindFloat64:
				v += s.Value.Float64()
			default:
				return 0, false
			}
		}
		return v, true
	}
}

// sourced is the client library's help of a series it reads from
// runtime/metrics: the runtime's description and where it comes from.
func sourced(name string) string {
	for _, d := range rtmetrics.All() {
		if d.Name == name {
			return d.Description + " Sourced from " + name + "."
		}
	}
	return "Sourced from " + name + "."
}

// gcQuantiles are go_gc_duration_seconds's, as the client library has them.
var gcQuantiles = []string{"0", "0.25", "0.5", "0.75", "1"}

// started is when the process's Go code began to run.
var started = time.Now()

// procStat is the kernel's statistics file, which holds the boot time
// (read on Linux only).
var procStat = "/proc/stat"

// userHZ is the unit of the CPU times in /proc (USER_HZ, 100 on every
// architecture Linux has), as the client library's procfs takes it.
const userHZ = 100

// unixSeconds is t in seconds since the epoch.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func count(c func(m *Metrics) *counter) func(*Metrics, *reading) (float64, bool) {
	return func(m *Metrics, _ *reading) (float64, bool) { return float64(c(m).Load()), true }
}

func flag(b func(r *reading) bool) func(*Metrics, *reading) (float64, bool) {
	return func(_ *Metrics, r *reading) (float64, bool) { return float64(b2i(b(r))), true }
}

func proc(v func(p *procStats) (float64, bool)) func(*Metrics, *reading) (float64, bool) {
	return func(_ *Metrics, r *reading) (float64, bool) { return v(&r.proc) }
}

// nodeFamilies are the node's families, sorted by name (WriteTo merges
// them with the leases', which are too). Names lists this package's.
var nodeFamilies = sortedNodeFamilies([]nodeFamily{
	{family: family{nameStopFailures, "Tries to stop a lease's units that failed even after SIGKILL, each journalled as stop_failed; lease_stop_failed is 1 while it lasts.", "counter"},
		value: count(func(m *Metrics) *counter { return &m.stopFailures })},
	{family: family{nameKills, "Stops that needed SIGKILL inside stop_wait.", "counter"},
		value: count(func(m *Metrics) *counter { return &m.kills })},
	{family: family{nameUnitFailures, "Failures of a lease's units while this node held it, or of their start.", "counter"},
		value: count(func(m *Metrics) *counter { return &m.unitFailures })},
	{family: family{nameGarbage, "Values under a lease's keys that are not records, each counted once.", "counter"},
		value: count(func(m *Metrics) *counter { return &m.garbage })},
	{family: family{nameRenewFailures, "Renewals that got no answer within reply_max, or an error.", "counter"},
		value: count(func(m *Metrics) *counter { return &m.renewFailures })},
	{family: family{nameServerChanges, "Answers from another Redis server than the one before (a restart, a restore, a failover).", "counter"},
		value: count(func(m *Metrics) *counter { return &m.serverChanges })},
	{family: family{nameRenewSeconds, "Time from sending a renewal to its answer, for the renewals Redis answered.", "histogram"},
		write: func(w *textWriter, m *Metrics, _ *reading) { m.renewSeconds.write(w, nameRenewSeconds) }},
	{family: family{nameAcquireSecs, "Time from sending an acquisition to its answer, won or lost.", "histogram"},
		write: func(w *textWriter, m *Metrics, _ *reading) { m.acquireSeconds.write(w, nameAcquireSecs) }},
	{family: family{nameRedisUp, "1 if Redis answered a PING within reply_max at this scrape.", "gauge"},
		value: flag(func(r *reading) bool { return r.redisUp })},
	{family: family{nameRedisDurable, "1 if Redis can lose no write it acknowledged (appendonly yes, appendfsync always); read at most once a minute.", "gauge"},
		value: flag(func(r *reading) bool { return r.redisDurable })},
	{family: family{nameDrained, "1 while the node is drained (unitlease drain).", "gauge"},
		value: flag(func(r *reading) bool { return r.drained })},
	{family: family{nameLeaseSpan, "The lease span in force on this node.", "gauge"},
		value: func(m *Metrics, _ *reading) (float64, bool) { return m.opt.LeaseSpan.Seconds(), true }},
	{family: family{nameCrashBound, "The longest a crash of a holder leaves a lease without one (lease span + 2 x poll_max + 4 x reply_max), before the unit's start.", "gauge"},
		value: func(m *Metrics, _ *reading) (float64, bool) { return m.opt.CrashBound.Seconds(), true }},
	{family: family{nameBuild, "The daemon's version and Go version; always 1.", "gauge"},
		write: func(w *textWriter, m *Metrics, _ *reading) {
			w.sample(nameBuild, "", "goversion", runtime.Version(), "version", m.opt.Version, 1)
		}},

	// The Go runtime's, as the client library's Go collector has them.
	{family: family{"go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.", "summary"},
		write: func(w *textWriter, _ *Metrics, r *reading) {
			const name = "go_gc_duration_seconds"
			for i, q := range gcQuantiles {
				w.sample(name, "", "quantile", q, "", "", r.gc.PauseQuantiles[i].Seconds())
			}
			w.sample(name, "_sum", "", "", "", "", r.gc.PauseTotal.Seconds())
			w.sample(name, "_count", "", "", "", "", float64(r.gc.NumGC))
		}},
	{family: family{"go_gc_gogc_percent", sourced(rtSamples[rtGOGC]), "gauge"}, value: rt(rtGOGC)},
	{family: family{"go_gc_gomemlimit_bytes", sourced(rtSamples[rtMemLimit]), "gauge"}, value: rt(rtMemLimit)},
	{family: family{"go_goroutines", "Number of goroutines that currently exist.", "gauge"},
		value: func(_ *Metrics, r *reading) (float64, bool) { return float64(r.goroutines), true }},
	{family: family{"go_info", "Information about the Go environment.", "gauge"},
		write: func(w *textWriter, _ *Metrics, _ *reading) {
			w.sample("go_info", "", "version", runtime.Version(), "", "", 1)
		}},
	{family: family{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", "gauge"},
		value: rt(rtHeapObjectsBytes)},
	{family: family{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", "counter"},
		value: rt(rtAllocsBytes)},
	{family: family{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", "gauge"},
		value: rt(rtHeapObjectsBytes)},
	{family: family{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", "gauge"},
		value: rt(rtHeapObjectsBytes, rtHeapUnusedBytes)},
	{family: family{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", "gauge"},
		value: rt(rtHeapObjects)},
	{family: family{"go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", "gauge"},
		value: func(_ *Metrics, r *reading) (float64, bool) { return unixSeconds(r.gc.LastGC), true }},
	{family: family{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", "gauge"},
		value: rt(rtHeapGoal)},
	{family: family{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", "gauge"},
		value: rt(rtStacksBytes)},
	{family: family{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", "gauge"},
		value: rt(rtTotalBytes)},
	{family: family{"go_sched_gomaxprocs_threads", sourced(rtSamples[rtGOMAXPROCS]), "gauge"}, value: rt(rtGOMAXPROCS)},
	{family: family{"go_threads", "Number of OS threads created.", "gauge"},
		value: func(_ *Metrics, r *reading) (float64, bool) { return float64(r.threads), true }},

	// The process's, as the client library's process collector has them;
	// one that cannot be read is left out (process_linux.go).
	{family: family{"process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter"},
		value: proc(func(p *procStats) (float64, bool) { return p.cpuSeconds, p.statOK })},
	{family: family{"process_max_fds", "Maximum number of open file descriptors.", "gauge"},
		value: proc(func(p *procStats) (float64, bool) { return p.maxFDs, p.maxFDsOK })},
	{family: family{"process_open_fds", "Number of open file descriptors.", "gauge"},
		value: proc(func(p *procStats) (float64, bool) { return p.openFDs, p.openFDsOK })},
	{family: family{"process_resident_memory_bytes", "Resident memory size in bytes.", "gauge"},
		value: proc(func(p *procStats) (float64, bool) { return p.rss, p.statOK })},
	{family: family{"process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "gauge"},
		value: proc(func(p *procStats) (float64, bool) { return p.startTime, p.startTimeOK })},
	{family: family{"process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge"},
		value: proc(func(p *procStats) (float64, bool) { return p.vsize, p.statOK })},
	{family: family{"process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", "gauge"},
		value: proc(func(p *procStats) (float64, bool) { return p.maxVsize, p.maxVsizeOK })},
})

func sortedNodeFamilies(fs []nodeFamily) []nodeFamily {
	for i := range fs {
		f := &fs[i]
		if v, name := f.value, f.name; v != nil {
			f.write = func(w *textWriter, m *Metrics, r *reading) {
				if x, ok := v(m, r); ok {
					w.sample(name, "", "", "", "", "", x)
				}
			}
		}
		if f.write == nil {
			panic("metrics: family " + f.name + " writes nothing")
		}
	}
	slices.SortFunc(fs, func(a, b nodeFamily) int { return strings.Compare(a.name, b.name) })
	return fs
}
