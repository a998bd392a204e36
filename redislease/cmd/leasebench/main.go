// Command leasebench measures the lease store against a real Redis on
// loopback and prints a table: renew and acquire latency, and the cost of
// renewing many leases from one client.
//
//	go run ./redislease/cmd/leasebench            # starts its own redis-server
//	go run ./redislease/cmd/leasebench -url redis://127.0.0.1:6379/0
//
// The many-leases round renews every lease concurrently, one goroutine per
// lease sharing the store's connection pool, as the daemon's supervisors do.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

func main() {
	url := flag.String("url", "", "Redis URL (default: start a private redis-server with appendfsync always)")
	samples := flag.Int("n", 2000, "samples for each latency")
	leases := flag.Int("leases", 1000, "leases renewed per round")
	rounds := flag.Int("rounds", 20, "rounds of renewing every lease")
	retry := flag.Duration("retry", 5*time.Second, "retry period the per-round cost is compared with")
	flag.Parse()
	if *url == "" {
		dir, err := os.MkdirTemp("", "leasebench")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
		srv := redistest.Run(dir, redistest.Options{AppendOnly: true})
		defer srv.Stop()
		*url = srv.URL()
	}
	store, err := redislease.New(redislease.Config{URL: *url, KeyPrefix: "leasebench:", Node: "bench",
		ReplyMax: 2 * time.Second, LeaseSpan: 37 * time.Second, PoolSize: 16})
	if err != nil {
		fail(err)
	}
	defer store.Close()
	b := bench{store: store, ctx: context.Background()}
	b.latencies(*samples)
	b.many(*leases, *rounds, *retry)
	b.print(*url)
}

type bench struct {
	store *redislease.Store
	ctx   context.Context
	rows  [][2]string
}

func (b *bench) row(name, value string) { b.rows = append(b.rows, [2]string{name, value}) }

func (b *bench) latencies(n int) {
	var acquire, renew []time.Duration
	for i := range n {
		name := "lat" + strconv.Itoa(i)
		seen, err := b.store.Observe(b.ctx, name)
		must(err)
		start := time.Now()
		l, err := b.store.Acquire(b.ctx, name, seen)
		acquire = append(acquire, time.Since(start))
		must(err)
		start = time.Now()
		_, err = b.store.Renew(b.ctx, name, l)
		renew = append(renew, time.Since(start))
		must(err)
	}
	b.row("renew latency p50 / p99", pct(renew, 50)+" / "+pct(renew, 99))
	b.row("acquire latency p50 / p99", pct(acquire, 50)+" / "+pct(acquire, 99))
}

func (b *bench) many(n, rounds int, retry time.Duration) {
	held := make([]policy.Record, n)
	name := func(i int) string { return "many" + strconv.Itoa(i) }
	for i := range held {
		seen, err := b.store.Observe(b.ctx, name(i))
		must(err)
		held[i], err = b.store.Acquire(b.ctx, name(i), seen)
		must(err)
	}
	redisBefore := b.redisCPU()
	cpuBefore := cpuTime()
	var walls []time.Duration
	for range rounds {
		start := time.Now()
		var wg sync.WaitGroup
		for i := range held {
			wg.Go(func() {
				l, err := b.store.Renew(b.ctx, name(i), held[i])
				must(err)
				held[i] = l
			})
		}
		wg.Wait()
		walls = append(walls, time.Since(start))
	}
	client := (cpuTime() - cpuBefore) / time.Duration(rounds)
	server := time.Duration(float64(b.redisCPU()-redisBefore) / float64(rounds))
	b.row(fmt.Sprintf("%d leases, one round (concurrent, pool 16): wall p50 / max", n), pct(walls, 50)+" / "+pct(walls, 100))
	b.row("  client CPU per round", fmt.Sprintf("%v = %.2f%% of a core at one round per %v", client.Round(time.Microsecond), 100*client.Seconds()/retry.Seconds(), retry))
	b.row("  redis-server CPU per round", fmt.Sprintf("%v = %.2f%% of a core at one round per %v", server.Round(time.Microsecond), 100*server.Seconds()/retry.Seconds(), retry))
}

// redisCPU is the server's used_cpu_sys + used_cpu_user.
func (b *bench) redisCPU() time.Duration {
	info, err := b.store.Info(b.ctx, "cpu")
	must(err)
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

func (b *bench) print(url string) {
	fmt.Printf("leasebench against %s (appendfsync always when started here)\n", url)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tvalue")
	for _, r := range b.rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	tw.Flush()
}

func pct(d []time.Duration, p int) string {
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(len(s)-1, len(s)*p/100)
	return s[i].Round(time.Microsecond).String()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func must(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "leasebench:", err)
	os.Exit(1)
}
