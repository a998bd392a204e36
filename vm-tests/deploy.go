//go:build linux

package vmtests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FastTiming is the timing of the tests and the demo: the shipped
// "quick" profile (retry 1s, renew_deadline 2s, stop_wait 2s, reply_max
// 500ms, polls every 500ms to 1s), whose lease span comes to 9.186 s
// with the packaged watchdog, so a failover takes seconds.
const FastTiming = `[timing]
profile = "quick"
`

// DeployOptions say what to install.
type DeployOptions struct {
	Unitlease   Programs
	Witness     string // a static binary on the host
	Service     []byte // unitlease.service
	RedisAddr   string // host:port on the host's loopback
	Timing      string // the [timing] table; default FastTiming
	SharedDir   string // the host directory bound at /shared in every node
	WitnessName string // names the witness's lock and log in SharedDir
	WitnessArgs string // e.g. "-on-term ignore"
}

// Deployment is unitlease running on some nodes, each reaching Redis
// through its own Proxy, with the witness as demo.service.
type Deployment struct {
	Nodes   []*Node
	Proxies []*Proxy
	opts    DeployOptions
	cursors map[*Node]string // each node's journal position at deploy
}

// Deploy installs unitlease, its configuration and the witness unit on
// nodes and starts the daemons.
func Deploy(ctx context.Context, nodes []*Node, opts DeployOptions) (*Deployment, error) {
	if opts.Timing == "" {
		opts.Timing = FastTiming
	}
	d := &Deployment{Nodes: nodes, opts: opts, cursors: map[*Node]string{}}
	for _, n := range nodes {
		if err := d.install(ctx, n); err != nil {
			d.Teardown(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	for _, n := range nodes {
		d.cursors[n] = d.cursor(ctx, n)
		if _, _, err := n.Run(ctx, "systemctl", "daemon-reload"); err != nil {
			return nil, err
		}
		if _, stderr, err := n.Run(ctx, "systemctl", "start", "unitlease.service"); err != nil {
			return nil, fmt.Errorf("%s: start unitlease: %w: %s", n.Name, err, stderr)
		}
	}
	return d, nil
}

func (d *Deployment) install(ctx context.Context, n *Node) error {
	p, err := NewProxy(d.opts.RedisAddr)
	if err != nil {
		return err
	}
	d.Proxies = append(d.Proxies, p)
	conf := fmt.Sprintf("node = %q\n[redis]\nurl = \"redis://%s/0\"\n%s", n.Name, p.Addr(), d.opts.Timing)
	steps := []error{
		d.opts.Unitlease.Install(ctx, n),
		n.CopyIn(ctx, d.opts.Witness, "/usr/local/bin/ul-witness", 0o755),
		n.WriteFile(ctx, "/etc/systemd/system/unitlease.service", d.opts.Service, 0o644),
		n.WriteFile(ctx, "/etc/unitlease/unitlease.toml", []byte(conf), 0o640),
		n.WriteFile(ctx, "/etc/systemd/system/demo.service", []byte(WitnessUnit(d.opts.WitnessName, d.opts.WitnessArgs, "demo")), 0o644),
	}
	for _, err := range steps {
		if err != nil {
			return err
		}
	}
	return nil
}

// Teardown stops the daemons and removes what Deploy installed, so the
// nodes are as they were.
func (d *Deployment) Teardown(ctx context.Context) {
	for _, n := range d.Nodes {
		if !n.Running() {
			continue
		}
		_, _, _ = n.Run(ctx, "systemctl", "stop", "unitlease.service", "demo.service", "other.service")
		_, _, _ = n.Run(ctx, "rm", "-rf", "/etc/systemd/system/demo.service", "/etc/systemd/system/other.service",
			"/etc/systemd/system/unitlease.service", "/etc/unitlease", "/var/lib/unitlease", "/etc/systemd/system/demo.service.d", "/run/systemd/system/demo.service.d", "/run/systemd/system/other.service.d")
		_, _, _ = n.Run(ctx, "systemctl", "daemon-reload")
		_, _, _ = n.Run(ctx, "systemctl", "reset-failed")
	}
	for _, p := range d.Proxies {
		p.Close()
	}
}

// Proxy returns n's proxy to Redis.
func (d *Deployment) Proxy(n *Node) *Proxy {
	for i, m := range d.Nodes {
		if m == n {
			return d.Proxies[i]
		}
	}
	return nil
}

// Active is unit's ActiveState on n.
func Active(ctx context.Context, n *Node, unit string) string {
	out, _, _ := n.Run(ctx, "systemctl", "show", "-P", "ActiveState", unit)
	return strings.TrimSpace(out)
}

// Running returns the nodes where demo.service is active.
func (d *Deployment) Running(ctx context.Context) []*Node {
	var on []*Node
	for _, n := range d.Nodes {
		if n.Running() && Active(ctx, n, "demo.service") == "active" {
			on = append(on, n)
		}
	}
	return on
}

// Leader waits until demo.service runs on a node and returns it; two
// nodes running it at once is an error. Polling is the harness waiting on
// a distributed system; what it finds is the assertion.
func (d *Deployment) Leader(ctx context.Context, limit time.Duration) (*Node, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		switch on := d.Running(ctx); len(on) {
		case 0:
		case 1:
			return on[0], nil
		default:
			return nil, fmt.Errorf("demo.service runs on %d nodes", len(on))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("no node runs demo.service after %v", limit)
}

func (d *Deployment) cursor(ctx context.Context, n *Node) string {
	out, _, _ := n.Run(ctx, "journalctl", "-n", "0", "--show-cursor", "--no-pager")
	_, c, _ := strings.Cut(out, "-- cursor: ")
	return strings.TrimSpace(c)
}

// Journal returns n's journal since deploy, with extra journalctl args.
func (d *Deployment) Journal(ctx context.Context, n *Node, args ...string) string {
	args = append([]string{"journalctl", "--no-pager", "--after-cursor", d.cursors[n]}, args...)
	out, _, _ := n.Run(ctx, args...)
	return out
}

// entries returns the unitlease.service journal entries of n since deploy
// with their event and message. (Matching fields in journalctl together
// with --after-cursor proved unreliable; filtering here is not.)
func (d *Deployment) entries(ctx context.Context, n *Node) []struct{ Event, Message string } {
	out := d.Journal(ctx, n, "-u", "unitlease.service", "-o", "json", "--output-fields=UNITLEASE_EVENT,MESSAGE")
	var es []struct{ Event, Message string }
	for _, line := range strings.Split(out, "\n") {
		var e struct {
			Event   string `json:"UNITLEASE_EVENT"`
			Message any    `json:"MESSAGE"` // a string, or bytes for non-UTF-8
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Event != "" {
			msg, _ := e.Message.(string)
			es = append(es, struct{ Event, Message string }{e.Event, msg})
		}
	}
	return es
}

// Events returns the UNITLEASE_EVENT values n's daemon logged since
// deploy, in order.
func (d *Deployment) Events(ctx context.Context, n *Node) []string {
	var evs []string
	for _, e := range d.entries(ctx, n) {
		evs = append(evs, e.Event)
	}
	return evs
}

// Messages returns the messages n's daemon logged with UNITLEASE_EVENT
// event since deploy, one per line.
func (d *Deployment) Messages(ctx context.Context, n *Node, event string) string {
	var b strings.Builder
	for _, e := range d.entries(ctx, n) {
		if e.Event == event {
			b.WriteString(e.Message + "\n")
		}
	}
	return b.String()
}

// WitnessRecord is one line of the witness log.
type WitnessRecord struct {
	What, Node string
	At         time.Duration // CLOCK_MONOTONIC, shared by every node and the host
	Token      string        // a start's UNITLEASE_TOKEN, "-" without one
}

// Records reads the witness log.
func (d *Deployment) Records() []WitnessRecord {
	data, _ := os.ReadFile(filepath.Join(d.opts.SharedDir, d.opts.WitnessName+".log"))
	var rs []WitnessRecord
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r WitnessRecord
		var ns int64
		if _, err := fmt.Sscanf(line, "%s %s %d", &r.What, &r.Node, &ns); err == nil {
			r.At = time.Duration(ns)
			if f := strings.Fields(line); len(f) == 4 {
				r.Token = f[3]
			}
			rs = append(rs, r)
		}
	}
	return rs
}

// Violations are the witness's records of finding its lock held.
func (d *Deployment) Violations() []WitnessRecord {
	var v []WitnessRecord
	for _, r := range d.Records() {
		if r.What == "violation" {
			v = append(v, r)
		}
	}
	return v
}

// Status is the lease "demo" as n's daemon reports it.
type Status struct {
	Role         string
	Holding      bool
	Version      uint64
	DeadlineLeft time.Duration `json:"deadline_left_ns"` // a holder's time left before it must stop
	LeaseAge     time.Duration `json:"lease_age_ns"`     // a standby's: how long the record has been unchanged
}

// LeaseStatus asks n's daemon.
func LeaseStatus(ctx context.Context, n *Node) Status {
	out, _, err := n.Run(ctx, "unitlease", "status", "--json")
	if err != nil {
		return Status{Role: "unreachable"}
	}
	var snap struct{ Leases []Status }
	if json.Unmarshal([]byte(out), &snap) != nil || len(snap.Leases) != 1 {
		return Status{Role: "unknown"}
	}
	return snap.Leases[0]
}
