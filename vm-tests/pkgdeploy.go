//go:build linux

package vmtests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// The package's deployment: unitlease as the .deb installs it (dpkg -i),
// configured the way an administrator would, with the witness as
// demo.service. Deploy installs a bare binary and the service file
// instead; both return a *Deployment.

// PackageOptions say how DeployPackage configures nodes on which
// InstallPackage has installed the .deb.
type PackageOptions struct {
	Witness   string // the witness, a static binary on the host
	RedisAddr string // host:port on the host's loopback
	// Redis, when set, is the body of unitlease.toml's [redis] table
	// (sentinels and master_name, say) instead of the URL of a Proxy
	// to RedisAddr.
	Redis       string
	Timing      string // the [timing] table; default FastTiming
	SharedDir   string // the host directory bound at /shared in every node
	WitnessName string // names the witness's lock and log in SharedDir
	WitnessArgs string // e.g. "-on-term ignore"
	Lease       string // the annotation's Lease=; default "demo"
	// ServiceDropIn, when set, is written as a drop-in of unitlease.service
	// (/etc/systemd/system/unitlease.service.d/vm-test.conf): settings of
	// the packaged unit an administrator may override.
	ServiceDropIn string
	// UnitDropIn, when set, is written as a drop-in of demo.service
	// (UnitDropInPath): settings the scenario gives the managed unit.
	UnitDropIn string
}

// UnitDropInPath is where DeployPackage writes PackageOptions.UnitDropIn.
const UnitDropInPath = "/etc/systemd/system/demo.service.d/vm-test.conf"

// ServiceDropInPath is where DeployPackage writes PackageOptions.ServiceDropIn.
const ServiceDropInPath = "/etc/systemd/system/unitlease.service.d/vm-test.conf"

// witnessUnit is the managed unit, demo.service: the exclusion witness,
// annotated for a lease.
const witnessUnit = `[Unit]
Description=unitlease witness

[Service]
ExecStart=/usr/local/bin/ul-witness -dir /shared -name %[1]s %[2]s

[X-UnitLease]
Lease=%[3]s
`

// WitnessUnit renders demo.service with the witness's log name, its
// arguments and the lease it is annotated for.
func WitnessUnit(name, args, lease string) string {
	return fmt.Sprintf(witnessUnit, name, args, lease)
}

// InstallPackage copies the .deb deb into n and installs it with dpkg -i.
func InstallPackage(ctx context.Context, n *Node, deb string) error {
	const path = "/tmp/unitlease-vm-test.deb"
	if err := n.CopyIn(ctx, deb, path, 0o644); err != nil {
		return err
	}
	if _, stderr, err := n.Run(ctx, "dpkg", "-i", path); err != nil {
		return fmt.Errorf("%s: dpkg -i: %w: %s", n.Name, err, stderr)
	}
	_, _, err := n.Run(ctx, "rm", "-f", path)
	return err
}

// DeployPackage configures unitlease on nodes where the package is
// installed: unitlease.toml with the node's name, the URL of a Proxy of its
// own to RedisAddr and the timing; the witness as demo.service; the
// optional drop-in of unitlease.service. Then it starts the daemons.
func DeployPackage(ctx context.Context, nodes []*Node, opts PackageOptions) (*Deployment, error) {
	if opts.Timing == "" {
		opts.Timing = FastTiming
	}
	if opts.Lease == "" {
		opts.Lease = "demo"
	}
	d := &Deployment{Nodes: nodes, opts: DeployOptions{
		Witness: opts.Witness, RedisAddr: opts.RedisAddr, Timing: opts.Timing,
		SharedDir: opts.SharedDir, WitnessName: opts.WitnessName, WitnessArgs: opts.WitnessArgs,
	}, cursors: map[*Node]string{}}
	for range nodes {
		p, err := NewProxy(opts.RedisAddr)
		if err != nil {
			d.Undeploy(context.WithoutCancel(ctx))
			return nil, err
		}
		d.Proxies = append(d.Proxies, p)
	}
	err := d.eachNode(func(n *Node) error { return d.configure(ctx, n, opts) })
	for _, n := range nodes {
		d.cursors[n] = d.cursor(ctx, n)
	}
	if err == nil {
		err = d.eachNode(func(n *Node) error {
			if _, stderr, err := n.Run(ctx, "systemctl", "start", "unitlease.service"); err != nil {
				return fmt.Errorf("%s: start unitlease: %w: %s", n.Name, err, stderr)
			}
			return nil
		})
	}
	if err != nil {
		d.Undeploy(context.WithoutCancel(ctx))
		return nil, err
	}
	return d, nil
}

func (d *Deployment) configure(ctx context.Context, n *Node, opts PackageOptions) error {
	table := fmt.Sprintf("url = \"redis://%s/0\"\n", d.Proxy(n).Addr())
	if opts.Redis != "" {
		table = opts.Redis
	}
	conf := fmt.Sprintf("node = %q\n[redis]\n%s%s", n.Name, table, opts.Timing)
	steps := []func() error{
		func() error { return n.CopyIn(ctx, opts.Witness, "/usr/local/bin/ul-witness", 0o755) },
		func() error { return n.WriteFile(ctx, "/etc/unitlease/unitlease.toml", []byte(conf), 0o640) },
		func() error {
			unit := WitnessUnit(opts.WitnessName, opts.WitnessArgs, opts.Lease)
			return n.WriteFile(ctx, "/etc/systemd/system/demo.service", []byte(unit), 0o644)
		},
		func() error {
			if opts.UnitDropIn == "" {
				_, _, err := n.Run(ctx, "rm", "-f", UnitDropInPath)
				return err
			}
			return n.WriteFile(ctx, UnitDropInPath, []byte(opts.UnitDropIn), 0o644)
		},
		func() error {
			if opts.ServiceDropIn == "" {
				_, _, err := n.Run(ctx, "rm", "-f", ServiceDropInPath)
				return err
			}
			return n.WriteFile(ctx, ServiceDropInPath, []byte(opts.ServiceDropIn), 0o644)
		},
		func() error { _, _, err := n.Run(ctx, "systemctl", "daemon-reload"); return err },
		func() error { _, _, err := n.Run(ctx, "systemctl", "reset-failed"); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	return nil
}

// eachNode runs f on every running node at once.
func (d *Deployment) eachNode(f func(n *Node) error) error {
	errs := make([]error, len(d.Nodes))
	var wg sync.WaitGroup
	for i, n := range d.Nodes {
		if !n.Running() {
			continue
		}
		wg.Go(func() { errs[i] = f(n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Undeploy stops the daemons (each stops its units) on every running node
// at once, removes the witness unit and the drop-in, and closes the
// proxies. The package and its configuration stay.
func (d *Deployment) Undeploy(ctx context.Context) {
	_ = d.eachNode(func(n *Node) error {
		_, _, _ = n.Run(ctx, "systemctl", "stop", "unitlease.service", "demo.service")
		_, _, _ = n.Run(ctx, "rm", "-rf", "/etc/systemd/system/demo.service", "/etc/systemd/system/demo.service.d", "/run/systemd/system/demo.service.d", ServiceDropInPath)
		_, _, _ = n.Run(ctx, "systemctl", "daemon-reload")
		_, _, _ = n.Run(ctx, "systemctl", "reset-failed")
		return nil
	})
	for _, p := range d.Proxies {
		p.Close()
	}
}

// SharedLog is the witness log's name in SharedDir.
func (d *Deployment) SharedLog() string { return d.opts.WitnessName + ".log" }

// UnitProps reads systemd properties of unit on n as a map.
func UnitProps(ctx context.Context, n *Node, unit string, props ...string) (map[string]string, error) {
	out, stderr, err := n.Run(ctx, "systemctl", "show", unit, "-p", strings.Join(props, ","))
	if err != nil {
		return nil, fmt.Errorf("%s: systemctl show %s: %w: %s", n.Name, unit, err, stderr)
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}
