package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/redislease"
)

// TestRunRefusesAnUnsafeSentinelSetup: run does not start on a Sentinel
// setup whose old master could take renewals after a promotion, and
// starts on one that bounds it.
func TestRunRefusesAnUnsafeSentinelSetup(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.SentinelOptions{MinReplicas: 1, MaxLag: 3, DownAfter: 5 * time.Second})
	rc := redislease.Config{Sentinels: s.Addrs(), MasterName: s.Name, KeyPrefix: "unitlease:", Node: "n1",
		ReplyMax: time.Second, LeaseSpan: 37 * time.Second}
	store, err := redislease.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	err = sentinelSafe(ctx, rc, store)
	if err == nil || !strings.Contains(err.Error(), "min-replicas-max-lag 3s + 2s = 5s is more than down-after-milliseconds 5s - 1s = 4s") {
		t.Fatalf("unsafe setup: %v", err)
	}
	s.SetAll("min-replicas-max-lag", "2")
	if err := sentinelSafe(ctx, rc, store); err != nil {
		t.Fatalf("safe setup: %v", err)
	}
	// One Redis needs no sentinel check.
	if err := sentinelSafe(ctx, redislease.Config{URL: "redis://127.0.0.1:1/0"}, nil); err != nil {
		t.Fatal(err)
	}
}
