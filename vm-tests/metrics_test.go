//go:build linux

package vmtests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrapeMetrics fetches a node's /metrics from the host (the nodes share
// its network), as Prometheus does.
func scrapeMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %v %s\n%s", addr, err, resp.Status, body)
	}
	return string(body)
}

// metricValue is the value of one series in a scrape, or -1.
func metricValue(scrape, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// promtoolCheck runs `promtool check metrics` (Debian's prometheus
// package) on a scrape.
func promtoolCheck(t *testing.T, scrape string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatal("promtool is not installed: apt-get install prometheus (it has promtool)")
	}
	cmd := exec.CommandContext(t.Context(), "promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestMetricsEndpointInABootedNode: with [metrics] enabled, each node's
// daemon serves /metrics on loopback; promtool check metrics finds no
// problem in a live scrape; the leader's scrape shows it holding the
// lease with its token, the standby's shows it standing by; a handoff
// moves the counters (the old holder's handoffs, the new one's
// acquisitions) and the roles.
func TestMetricsEndpointInABootedNode(t *testing.T) {
	d := deployOn(t, []*Node{cluster.Node(0), cluster.Node(1)})
	addr := map[*Node]string{}
	for _, n := range d.nodes {
		addr[n] = freeAddr(t)
		conf := fmt.Sprintf("[metrics]\nenabled = true\nlisten = %q\n", addr[n])
		run(t, n, "sh", "-c", "printf '%s' \"$1\" >> /etc/unitlease/unitlease.toml && systemctl restart unitlease.service", "sh", conf)
	}
	leader, standby := d.leader(60 * time.Second)
	role := func(n *Node, r string) float64 {
		return metricValue(scrapeMetrics(t, addr[n]), `unitlease_lease_role{lease="demo",role="`+r+`"}`)
	}
	// The standby's role shows once its first observation is in.
	for deadline := time.Now().Add(10 * time.Second); role(standby, "standby") != 1; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's scrape never showed it standing by:\n%s", standby.Name, scrapeMetrics(t, addr[standby]))
		}
	}
	lead := scrapeMetrics(t, addr[leader])
	var ours []string
	for _, line := range strings.Split(lead, "\n") {
		if strings.HasPrefix(line, "unitlease_") {
			ours = append(ours, line)
		}
	}
	t.Logf("the leader's scrape, unitlease_ series:\n%s", strings.Join(ours, "\n"))
	promtoolCheck(t, lead)
	promtoolCheck(t, scrapeMetrics(t, addr[standby]))
	for series, want := range map[string]float64{
		`unitlease_lease_role{lease="demo",role="leader"}`:      1,
		`unitlease_unit_info{lease="demo",unit="demo.service"}`: 1,
		`unitlease_acquisitions_total{lease="demo"}`:            1,
		`unitlease_redis_up`:                                    1,
		`unitlease_leases`:                                      1,
		`unitlease_lease_span_seconds`:                          9.186,
		`unitlease_build_info{goversion="` + goVersion(t) + `",version="` + daemonVersion(t, leader) + `"}`: 1,
	} {
		if got := metricValue(lead, series); got != want {
			t.Errorf("%s on the leader %s = %v, want %v", series, leader.Name, got, want)
		}
	}
	if tok := metricValue(lead, `unitlease_lease_token{lease="demo"}`); tok < 1 {
		t.Errorf("the leader's scrape has no token:\n%s", lead)
	}
	if n := metricValue(lead, "unitlease_renewal_duration_seconds_count"); n < 1 {
		t.Errorf("no renewal measured on the leader: %v", n)
	}

	run(t, leader, "unitlease", "handoff", "demo")
	waitState(t, standby, "demo.service", "active", 30*time.Second)
	for deadline := time.Now().Add(10 * time.Second); role(standby, "leader") != 1 || role(leader, "leader") == 1; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the roles did not follow the handoff:\n%s\n%s", scrapeMetrics(t, addr[leader]), scrapeMetrics(t, addr[standby]))
		}
	}
	if got := metricValue(scrapeMetrics(t, addr[leader]), `unitlease_handoffs_total{lease="demo"}`); got != 1 {
		t.Errorf("handoffs on %s after its handoff: %v, want 1", leader.Name, got)
	}
	after := scrapeMetrics(t, addr[standby])
	if got := metricValue(after, `unitlease_acquisitions_total{lease="demo"}`); got != 1 {
		t.Errorf("acquisitions on %s after it took the lease: %v, want 1", standby.Name, got)
	}
	promtoolCheck(t, after)
}

func goVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func daemonVersion(t *testing.T, n *Node) string {
	t.Helper()
	f := strings.Fields(run(t, n, "unitlease", "version"))
	if len(f) < 2 {
		t.Fatalf("unitlease version: %v", f)
	}
	return f[1]
}
