//go:build linux

// Command demo shows unitlease at work on two containers: which node runs
// the demo unit, a power cut of that node, and the other taking over, with
// the measured gap. `make demo` runs it as root.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/unitlease/unitlease/internal/redistest"
	vmtests "github.com/unitlease/unitlease/vm-tests"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }

func demo(ctx context.Context) error {
	if err := vmtests.CheckHost(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "unitlease-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	say("building unitlease and the demo unit's program")
	bin, err := vmtests.BuildUnitlease(ctx, ".", tmp)
	if err != nil {
		return err
	}
	wit := filepath.Join(tmp, "witness")
	if err := vmtests.BuildStatic(ctx, "./vm-tests/testdata/witness", wit); err != nil {
		return err
	}
	service, err := os.ReadFile("packaging/unitlease.service")
	if err != nil {
		return err
	}
	say("starting Redis on loopback (appendonly, appendfsync always)")
	if err := os.Mkdir(filepath.Join(tmp, "redis"), 0o700); err != nil {
		return err
	}
	redis := redistest.Run(filepath.Join(tmp, "redis"), redistest.Options{AppendOnly: true})
	defer redis.Stop()
	shared := filepath.Join(tmp, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		return err
	}
	say("booting two Debian 12 containers with systemd (the first run builds their root file system, about a minute)")
	c, err := vmtests.NewCluster(ctx, vmtests.Options{Nodes: 2, Binds: []string{shared + ":/shared"}})
	if err != nil {
		return err
	}
	defer c.Close()
	say("installing unitlease and demo.service ([X-UnitLease] Lease=demo) on %s and %s", c.Node(0).Name, c.Node(1).Name)
	dep, err := vmtests.Deploy(ctx, c.Nodes, vmtests.DeployOptions{Unitlease: bin, Witness: wit, Service: service,
		RedisAddr: redis.Addr(), SharedDir: shared, WitnessName: "demo"})
	if err != nil {
		return err
	}
	defer dep.Teardown(context.WithoutCancel(ctx))
	return failover(ctx, c, dep)
}

func failover(ctx context.Context, c *vmtests.Cluster, dep *vmtests.Deployment) error {
	say("waiting for one node to take the lease (a missing key must stay missing for the lease span first)")
	leader, err := dep.Leader(ctx, 2*time.Minute)
	if err != nil {
		return err
	}
	other := c.Node(0)
	if other == leader {
		other = c.Node(1)
	}
	show(ctx, other, "unitlease", "status")
	say("%s runs demo.service; cutting its power (SIGKILL to the container's init)", leader.Name)
	cut := monotonic()
	if err := leader.PowerCut(ctx); err != nil {
		return err
	}
	next, err := dep.Leader(ctx, 2*time.Minute)
	if err != nil {
		return err
	}
	var started time.Duration
	for _, r := range dep.Records() {
		if r.What == "start" && r.Node == next.Name && r.At > cut {
			started = r.At
			break
		}
	}
	say("%s took over: demo.service started %v after the power cut (lease span %v + poll_max 1s + start is the bound)",
		next.Name, (started - cut).Round(time.Millisecond), leaseSpan(ctx, next))
	show(ctx, next, "unitlease", "status")
	show(ctx, next, "journalctl", "-u", "unitlease", "-o", "short-monotonic", "--no-pager", "UNITLEASE_EVENT=acquired", "+", "UNITLEASE_EVENT=started", "+", "UNITLEASE_EVENT=stopped")
	if v := dep.Violations(); len(v) > 0 {
		return fmt.Errorf("the witness saw two copies running: %v", v)
	}
	say("the witness (a flock on a file shared by both nodes) saw no overlap; cleaning up")
	return nil
}

func show(ctx context.Context, n *vmtests.Node, args ...string) {
	out, stderr, err := n.Run(ctx, args...)
	fmt.Printf("\n%s# %s\n%s", n.Name, strings.Join(args, " "), out)
	if err != nil {
		fmt.Printf("(%v: %s)\n", err, stderr)
	}
}

// leaseSpan asks n's daemon for the lease span in force.
func leaseSpan(ctx context.Context, n *vmtests.Node) string {
	out, _, _ := n.Run(ctx, "unitlease", "status", "--json")
	var snap struct {
		Timing struct {
			LeaseSpan time.Duration `json:"lease_span_ns"`
		}
	}
	_ = json.Unmarshal([]byte(out), &snap)
	return snap.Timing.LeaseSpan.String()
}

func monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
