package redislease

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Failover is what bounds a split brain under Redis Sentinel: how long a
// master cut off from its replicas goes on taking writes, and how soon
// the sentinels can promote a replica.
type Failover struct {
	// MinReplicas and MaxLag are the master's min-replicas-to-write and
	// min-replicas-max-lag: with MinReplicas > 0 it refuses writes once
	// fewer replicas than that acknowledged within MaxLag.
	MinReplicas int           `json:"min_replicas_to_write"`
	MaxLag      time.Duration `json:"min_replicas_max_lag"`
	// Replicas is how many replicas the sentinels know of.
	Replicas int `json:"replicas"`
	// DownAfter is the smallest down-after-milliseconds among the
	// sentinels that answered; FailoverTimeout the largest
	// failover-timeout. Sentinels counts those that answered, Known
	// how many the first of them knows (itself included), Quorum its
	// quorum.
	DownAfter       time.Duration `json:"down_after"`
	FailoverTimeout time.Duration `json:"failover_timeout"`
	Sentinels       int           `json:"sentinels_answering"`
	Known           int           `json:"sentinels_known"`
	Quorum          int           `json:"quorum"`
	// Unread says what could not be read, one sentence each; a setting
	// that was not read counts as unsafe.
	Unread []string `json:"unread,omitempty"`
}

// Writable is how long after it loses every replica a master may still
// acknowledge a write: min-replicas-max-lag, plus a second because
// replicas acknowledge once a second, plus a second because the master
// counts lag in whole seconds and recounts its good replicas once a
// second.
func (f Failover) Writable() time.Duration { return f.MaxLag + 2*time.Second }

// Detect is how soon after a master stops answering the sentinels may
// promote a replica: down-after-milliseconds after the last answer, which
// came up to one ping (a second, or down-after if shorter) before.
func (f Failover) Detect() time.Duration { return f.DownAfter - min(time.Second, f.DownAfter) }

// Problems are the ways this setup lets a master cut off from the
// sentinels keep taking a leader's renewals after a replica was promoted
// and a standby aged its record for a lease span there, one sentence
// each; none means the setup is safe on its assumption (every sentinel on
// the same machine as a Redis server, so that a side of a partition that
// can promote holds a majority of the machines).
func (f Failover) Problems() []string {
	p := append([]string(nil), f.Unread...)
	need := max(1, f.Replicas/2)
	switch {
	case f.MinReplicas == 0:
		p = append(p, "min-replicas-to-write is 0: a master cut off from its replicas takes writes for as long as it runs, so a leader could renew there while a standby acquires on the promoted replica; set min-replicas-to-write "+strconv.Itoa(need)+" and min-replicas-max-lag on every Redis server")
	case f.MinReplicas < need:
		p = append(p, fmt.Sprintf("min-replicas-to-write is %d with %d replicas: a master that keeps %d of them on its side of a partition goes on taking writes; set it to %d", f.MinReplicas, f.Replicas, f.MinReplicas, need))
	}
	if f.MinReplicas > 0 && f.Writable() > f.Detect() {
		p = append(p, fmt.Sprintf("min-replicas-max-lag %v + 2s = %v is more than down-after-milliseconds %v - %v = %v: a master cut off from the sentinels may still take a renewal after a replica was promoted; lower min-replicas-max-lag or raise down-after-milliseconds", f.MaxLag, f.Writable(), f.DownAfter, f.DownAfter-f.Detect(), f.Detect()))
	}
	return p
}

// Inequality is the rule Problems checks, with the numbers.
func (f Failover) Inequality() string {
	return fmt.Sprintf("min-replicas-max-lag + 2s <= down-after-milliseconds - 1s: %v <= %v", f.Writable(), f.Detect())
}

// Failover reads the settings that bound a split brain: from the master,
// min-replicas-to-write and min-replicas-max-lag (CONFIG GET); from every
// configured sentinel, SENTINEL MASTER. It is for a store configured with
// sentinels only.
func (s *Store) Failover(ctx context.Context) (Failover, error) {
	if s.sentinel == nil {
		return Failover{}, fmt.Errorf("redislease: no sentinels configured")
	}
	f := Failover{}
	cctx, cancel := s.bounded(ctx)
	cfg, err := s.rdb.ConfigGet(cctx, "min-replicas-*").Result()
	cancel()
	if err != nil {
		f.Unread = append(f.Unread, fmt.Sprintf("could not read min-replicas-to-write and min-replicas-max-lag from the master (CONFIG GET: %v)", err))
	} else {
		f.MinReplicas, _ = strconv.Atoi(cfg["min-replicas-to-write"])
		lag, _ := strconv.Atoi(cfg["min-replicas-max-lag"])
		f.MaxLag = time.Duration(lag) * time.Second
	}
	for _, addr := range s.sentinel.SentinelAddrs {
		m, err := s.sentinelMaster(ctx, addr)
		if err != nil {
			f.Unread = append(f.Unread, fmt.Sprintf("sentinel %s: %v", addr, err))
			continue
		}
		num := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
		down := time.Duration(num("down-after-milliseconds")) * time.Millisecond
		timeout := time.Duration(num("failover-timeout")) * time.Millisecond
		if f.Sentinels == 0 {
			f.DownAfter, f.Replicas, f.Known, f.Quorum = down, num("num-slaves"), num("num-other-sentinels")+1, num("quorum")
		}
		f.Sentinels++
		f.DownAfter = min(f.DownAfter, down)
		f.FailoverTimeout = max(f.FailoverTimeout, timeout)
	}
	if f.Sentinels == 0 {
		return f, fmt.Errorf("redislease: no sentinel answered: %v", f.Unread)
	}
	return f, nil
}

func (s *Store) sentinelMaster(ctx context.Context, addr string) (map[string]string, error) {
	fo := s.sentinel
	sc := redis.NewSentinelClient(&redis.Options{
		Addr: addr, Username: fo.SentinelUsername, Password: fo.SentinelPassword, TLSConfig: fo.TLSConfig,
		Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: s.replyMax, ReadTimeout: s.replyMax, WriteTimeout: s.replyMax, ContextTimeoutEnabled: true,
	})
	defer sc.Close()
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	return sc.Master(ctx, fo.MasterName).Result()
}
