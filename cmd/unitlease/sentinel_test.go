package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/redistest"
)

// TestCheckSentinel: check prints the sentinels' and the master's
// settings and the inequality with their numbers, and fails a setup whose
// old master could take writes after a promotion.
func TestCheckSentinel(t *testing.T) {
	for _, tt := range []struct {
		name   string
		opts   redistest.SentinelOptions
		failed bool
		want   []string
	}{
		{"safe", redistest.SentinelOptions{MinReplicas: 1, MaxLag: 1, DownAfter: 4 * time.Second}, false, []string{
			"ok       redis sentinel: 3 of 3 sentinels answer (quorum 2), 2 replicas, down-after-milliseconds 4s, failover-timeout 3s; the weakest of 3 servers: min-replicas-to-write 1, min-replicas-max-lag 1s",
			"ok       redis sentinel: a master cut off from the sentinels stops taking writes before a replica can be promoted (min-replicas-max-lag + 2s <= down-after-milliseconds - 1s: 3s <= 3s)"}},
		{"unbounded", redistest.SentinelOptions{DownAfter: 4 * time.Second}, true, []string{
			"error    redis sentinel: master port ", "error    redis sentinel: replica 127.0.0.1:"}},
		{"lag", redistest.SentinelOptions{MinReplicas: 1, MaxLag: 2, DownAfter: 4 * time.Second}, true, []string{
			"error    redis sentinel: min-replicas-max-lag 2s + 2s = 4s is more than down-after-milliseconds 4s - 1s = 3s"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := redistest.StartSentinel(t, tt.opts)
			doc := fmt.Sprintf("node = \"n1\"\n[redis]\nsentinels = [%q, %q, %q]\nmaster_name = %q\n", s.Addrs()[0], s.Addrs()[1], s.Addrs()[2], s.Name)
			cfg, err := config.Parse("u.toml", []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			c := checker{out: &out}
			c.redis(context.Background(), cfg)
			if c.failed != tt.failed {
				t.Errorf("failed %v, want %v", c.failed, tt.failed)
			}
			lines := strings.Split(out.String(), "\n")
			if !strings.HasPrefix(lines[0], "ok       redis master unitlease via sentinels 127.0.0.1:") {
				t.Errorf("first line %q", lines[0])
			}
			for _, w := range tt.want {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(l, w)
				}
				if !found {
					t.Errorf("no line starting %q in:\n%s", w, out.String())
				}
			}
		})
	}
}
