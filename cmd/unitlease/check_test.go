package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/unitctl"
)

// TestCheckDropIn: what check reports of the drop-in of a unit that
// passed validation.
func TestCheckDropIn(t *testing.T) {
	const path = "/run/systemd/system/vpn.service.d/zz-unitlease.conf"
	text := []byte("[Unit]\nBindsTo=unitlease.service\n")
	base := dropInState{unit: "vpn.service", path: path, daemon: "unitlease.service", daemonState: "active",
		onDisk: text, want: text, protections: "the guard runs first"}
	defeated := &unitctl.DropInError{Unit: "vpn.service", Path: path, Applied: true, OnDisk: true, Problems: []string{
		"KillMode=process (set in /etc/systemd/system/vpn.service.d/zzz.conf:3), want control-group",
		"FinalKillSignal=SIGQUIT (set in /etc/systemd/system/vpn.service.d/zzz.conf:4), want SIGKILL",
	}}
	absent := &unitctl.DropInError{Unit: "vpn.service", Path: path, Problems: []string{
		"systemd does not list " + path + " among its drop-ins: it is not on disk",
		"ExecStartPre= is [], want the guard and then the unit's own 0 command(s)",
	}}
	tests := []struct {
		name   string
		edit   func(*dropInState)
		failed bool
		want   []string // the lines, in order
	}{
		{"in effect", func(*dropInState) {}, false, []string{
			"ok       vpn.service: drop-in " + path + " in effect: the guard runs first"}},
		{"defeated", func(d *dropInState) { d.verified = defeated }, true, []string{
			"error    vpn.service: drop-in " + path + " not in effect: KillMode=process (set in /etc/systemd/system/vpn.service.d/zzz.conf:3), want control-group",
			"error    vpn.service: drop-in " + path + " not in effect: FinalKillSignal=SIGQUIT (set in /etc/systemd/system/vpn.service.d/zzz.conf:4), want SIGKILL"}},
		{"no daemon yet", func(d *dropInState) { d.verified, d.daemonState, d.onDisk = absent, "inactive", nil }, false, []string{
			"warning  vpn.service: no drop-in yet (" + path + "): unitlease.service is inactive, and writes it when it starts; until then a start of vpn.service does not go through the guard"}},
		{"daemon runs, no drop-in", func(d *dropInState) { d.verified, d.onDisk = absent, nil }, true, []string{
			"error    vpn.service: drop-in " + path + " not in effect: systemd does not list " + path + " among its drop-ins: it is not on disk",
			"error    vpn.service: drop-in " + path + " not in effect: ExecStartPre= is [], want the guard and then the unit's own 0 command(s)",
			"error    vpn.service: unitlease.service is active but has not written " + path + ": it does at the next systemctl daemon-reload, unless it refused the unit (journalctl -u unitlease.service)"}},
		{"gone from disk", func(d *dropInState) { d.onDisk = nil }, false, []string{
			"ok       vpn.service: drop-in " + path + " in effect: the guard runs first",
			"warning  vpn.service: systemd applies " + path + ", but it is gone from disk: the next daemon-reload drops it, and only a running unitlease.service writes it again"}},
		{"another configuration", func(d *dropInState) { d.want = []byte("other") }, false, []string{
			"ok       vpn.service: drop-in " + path + " in effect: the guard runs first",
			"warning  vpn.service: " + path + " differs from what this configuration writes: the daemon that wrote it runs with another configuration or version; restart unitlease.service to apply this one"}},
		{"unreadable", func(d *dropInState) { d.verified = errors.New("unitctl: read the settings of vpn.service: timeout") }, true, []string{
			"error    vpn.service: verify its drop-in " + path + ": unitctl: read the settings of vpn.service: timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			c := checker{out: &out}
			d := base
			tt.edit(&d)
			c.dropIn(d)
			if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", out.String(), strings.Join(tt.want, "\n"))
			}
			if c.failed != tt.failed {
				t.Errorf("failed %t, want %t", c.failed, tt.failed)
			}
		})
	}
}

// TestCheckRefusedDropIn: what check says of the drop-in of a refused
// unit, after the refusal's error.
func TestCheckRefusedDropIn(t *testing.T) {
	const path = "/run/systemd/system/vpn.service.d/zz-unitlease.conf"
	for _, tt := range []struct {
		onDisk bool
		want   string
	}{
		{true, "warning  vpn.service: its drop-in " + path + " is still on disk (the guard in it runs where systemd applies it), but the unit is refused: the daemon does not run it on this node\n"},
		{false, "warning  vpn.service: no drop-in (" + path + "): the daemon does not manage a refused unit, and a start of it does not go through the guard\n"},
	} {
		var out bytes.Buffer
		c := checker{out: &out}
		c.refusedDropIn("vpn.service", path, tt.onDisk)
		if out.String() != tt.want || c.failed {
			t.Errorf("on disk %t: got %q (failed %t), want %q", tt.onDisk, out.String(), c.failed, tt.want)
		}
	}
}

// TestCheckSandbox: check, run by hand as root, could read a password
// file in /root or /tmp; the daemon's sandbox hides them, and check says
// so.
func TestCheckSandbox(t *testing.T) {
	var out bytes.Buffer
	c := checker{out: &out}
	cfg := config.Defaults()
	cfg.Redis.PasswordFile, cfg.Redis.CAFile, cfg.Redis.KeyFile = "/root/redis.pw", "/tmp/ca.pem", "/etc/unitlease/key.pem"
	c.sandbox(&cfg)
	want := "error    redis.password_file /root/redis.pw: the daemon cannot read it (ProtectHome=yes hides /root in unitlease.service); put it under /etc/unitlease\n" +
		"error    redis.ca_file /tmp/ca.pem: the daemon cannot read it (PrivateTmp=yes gives the daemon its own /tmp in unitlease.service); put it under /etc/unitlease\n"
	if !c.failed || out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// TestCheckOutputIsInert: what Redis answered reaches check's lines with
// every non-printable character escaped.
func TestCheckOutputIsInert(t *testing.T) {
	var out bytes.Buffer
	c := checker{out: &out}
	c.warn("redis durability: appendfsync is %s", "x\x1b]0;owned\x07\x1b[2J\u009b\xff")
	want := "warning  redis durability: appendfsync is x\\x1b]0;owned\\a\\x1b[2J\\u009b\ufffd\n"
	if out.String() != want {
		t.Fatalf("got %q\nwant %q", out.String(), want)
	}
}

// TestCheckMetrics: off says how to turn it on; loopback is fine; any
// other address is a warning, never an error.
func TestCheckMetrics(t *testing.T) {
	for _, c := range []struct {
		m    config.Metrics
		want string
	}{
		{config.Metrics{Listen: "127.0.0.1:9790"}, "ok       metrics: off ([metrics] enabled = true serves them at http://127.0.0.1:9790/metrics)\n"},
		{config.Metrics{Enabled: true, Listen: "127.0.0.1:9790"}, "ok       metrics: http://127.0.0.1:9790/metrics, on loopback\n"},
		{config.Metrics{Enabled: true, Listen: "[::1]:9790"}, "ok       metrics: http://[::1]:9790/metrics, on loopback\n"},
		{config.Metrics{Enabled: true, Listen: "0.0.0.0:9790"}, "warning  metrics: http://0.0.0.0:9790/metrics is reachable from beyond this machine, in plain HTTP without credentials: only on a network you trust, or keep loopback behind a TLS proxy\n"},
	} {
		var out bytes.Buffer
		ch := checker{out: &out}
		ch.metrics(c.m)
		if out.String() != c.want || ch.failed {
			t.Errorf("%+v:\n got %q\nwant %q", c.m, out.String(), c.want)
		}
	}
}
