package redislease

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Failover is what bounds a split brain under Redis Sentinel: how long a
// master cut off from its replicas goes on taking writes, and how soon
// the sentinels can promote a replica.
type Failover struct {
	// MinReplicas and MaxLag are the weakest min-replicas-to-write and
	// min-replicas-max-lag among the master and the replicas that
	// answered (each may be promoted): a server with MinReplicas > 0 and
	// MaxLag > 0 refuses writes once fewer replicas than MinReplicas
	// acknowledged within MaxLag. Servers has each one's.
	MinReplicas int           `json:"min_replicas_to_write"`
	MaxLag      time.Duration `json:"min_replicas_max_lag"`
	Servers     []Fence       `json:"servers"`
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
	// Unchecked names replicas the sentinels see down, whose settings
	// could not be read: they are not promoted while down.
	Unchecked []string `json:"unchecked,omitempty"`
}

// Fence is one server's min-replicas-to-write and min-replicas-max-lag.
type Fence struct {
	Addr        string        `json:"addr"`
	Role        string        `json:"role"` // "master" or "replica"
	MinReplicas int           `json:"min_replicas_to_write"`
	MaxLag      time.Duration `json:"min_replicas_max_lag"`
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
// and a standby aged its record for a lease span there, or never take a
// write at all, one sentence each; none means the setup is safe on its
// assumption (every sentinel on the same machine as a Redis server, so
// that a side of a partition that can promote holds a majority of the
// machines).
func (f Failover) Problems() []string {
	p := append([]string(nil), f.Unread...)
	need := max(1, f.Replicas/2)
	if len(f.Servers) == 0 {
		p = append(p, "no Redis server's min-replicas-to-write and min-replicas-max-lag were read")
	}
	for _, s := range f.Servers {
		switch {
		case s.MinReplicas == 0 || s.MaxLag == 0:
			p = append(p, fmt.Sprintf("%s %s has min-replicas-to-write %d and min-replicas-max-lag %v: either 0 turns the fence off, so cut off from its replicas it takes writes for as long as it runs (a leader could renew there while a standby acquires on the promoted replica); set min-replicas-to-write %d and min-replicas-max-lag on every Redis server",
				s.Role, s.Addr, s.MinReplicas, s.MaxLag, need))
		case s.MinReplicas < need:
			p = append(p, fmt.Sprintf("%s %s has min-replicas-to-write %d with %d replicas: a master that keeps %d of them on its side of a partition goes on taking writes; set it to %d",
				s.Role, s.Addr, s.MinReplicas, f.Replicas, s.MinReplicas, need))
		case s.MinReplicas > f.Replicas:
			p = append(p, fmt.Sprintf("%s %s has min-replicas-to-write %d but the sentinels know %d replicas: as master it would refuse every write; set it to %d",
				s.Role, s.Addr, s.MinReplicas, f.Replicas, need))
		}
	}
	if f.Known > f.Sentinels {
		p = append(p, fmt.Sprintf("the sentinels know %d sentinels, %d answered from the configuration: list every sentinel in sentinels, so that each one's down-after-milliseconds is read", f.Known, f.Sentinels))
	}
	if f.MinReplicas > 0 && f.MaxLag > 0 && f.Writable() > f.Detect() {
		p = append(p, fmt.Sprintf("min-replicas-max-lag %v + 2s = %v is more than down-after-milliseconds %v - %v = %v: a master cut off from the sentinels may still take a renewal after a replica was promoted; lower min-replicas-max-lag or raise down-after-milliseconds", f.MaxLag, f.Writable(), f.DownAfter, f.DownAfter-f.Detect(), f.Detect()))
	}
	return p
}

// Inequality is the rule Problems checks, with the numbers.
func (f Failover) Inequality() string {
	return fmt.Sprintf("min-replicas-max-lag + 2s <= down-after-milliseconds - 1s: %v <= %v", f.Writable(), f.Detect())
}

// Failover reads the settings that bound a split brain: from every
// configured sentinel, SENTINEL MASTER and the replicas it knows; from the
// master and every replica that answers, min-replicas-to-write and
// min-replicas-max-lag (CONFIG GET). It is for a store configured with
// sentinels only.
func (s *Store) Failover(ctx context.Context) (Failover, error) {
	if s.sentinel == nil {
		return Failover{}, fmt.Errorf("redislease: no sentinels configured")
	}
	f := Failover{}
	var replicas []map[string]string
	for _, addr := range s.sentinel.SentinelAddrs {
		m, reps, err := s.sentinelMaster(ctx, addr)
		if err != nil {
			f.Unread = append(f.Unread, fmt.Sprintf("sentinel %s: %v", addr, err))
			continue
		}
		num := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
		down := time.Duration(num("down-after-milliseconds")) * time.Millisecond
		timeout := time.Duration(num("failover-timeout")) * time.Millisecond
		if f.Sentinels == 0 {
			f.DownAfter, f.Replicas, f.Known, f.Quorum = down, num("num-slaves"), num("num-other-sentinels")+1, num("quorum")
			replicas = reps
		}
		f.Sentinels++
		f.DownAfter = min(f.DownAfter, down)
		f.FailoverTimeout = max(f.FailoverTimeout, timeout)
	}
	if f.Sentinels == 0 {
		return f, fmt.Errorf("redislease: no sentinel answered: %v", f.Unread)
	}
	f.fence(ctx, "master", "", s.rdb)
	for _, r := range replicas {
		addr := net.JoinHostPort(r["ip"], r["port"])
		if strings.Contains(r["flags"], "down") || strings.Contains(r["flags"], "disconnected") {
			f.Unchecked = append(f.Unchecked, addr)
			continue
		}
		c := redis.NewClient(s.serverOptions(addr))
		f.fence(ctx, "replica", addr, c)
		c.Close()
	}
	for i, fc := range f.Servers {
		if i == 0 || fc.MinReplicas < f.MinReplicas {
			f.MinReplicas = fc.MinReplicas
		}
		if i == 0 || fc.MaxLag == 0 || f.MaxLag != 0 && fc.MaxLag > f.MaxLag {
			f.MaxLag = fc.MaxLag
		}
	}
	return f, nil
}

// fence reads one server's min-replicas settings into f.
func (f *Failover) fence(ctx context.Context, role, addr string, c *redis.Client) {
	ctx, cancel := context.WithTimeout(ctx, c.Options().ReadTimeout)
	defer cancel()
	if addr == "" {
		addr = "(as the sentinels name it)"
		if a, err := c.ConfigGet(ctx, "port").Result(); err == nil {
			addr = "port " + a["port"]
		}
	}
	cfg, err := c.ConfigGet(ctx, "min-replicas-*").Result()
	if err != nil {
		f.Unread = append(f.Unread, fmt.Sprintf("could not read min-replicas-to-write and min-replicas-max-lag from the %s %s (CONFIG GET: %v)", role, addr, err))
		return
	}
	fc := Fence{Addr: addr, Role: role}
	fc.MinReplicas, _ = strconv.Atoi(cfg["min-replicas-to-write"])
	lag, _ := strconv.Atoi(cfg["min-replicas-max-lag"])
	fc.MaxLag = time.Duration(lag) * time.Second
	f.Servers = append(f.Servers, fc)
}

// serverOptions are the options to reach one data server directly, with
// the master's credentials and TLS.
func (s *Store) serverOptions(addr string) *redis.Options {
	fo := s.sentinel
	o := s.direct(addr, fo.Username, fo.Password)
	o.DB = fo.DB
	return o
}

// direct are the options of one connection the store opens beside its
// pool: no retries, every call bounded by reply_max, TLS as configured.
func (s *Store) direct(addr, user, password string) *redis.Options {
	return &redis.Options{
		Addr: addr, Username: user, Password: password, TLSConfig: s.sentinel.TLSConfig,
		Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: s.replyMax, ReadTimeout: s.replyMax, WriteTimeout: s.replyMax, ContextTimeoutEnabled: true,
	}
}

// sentinelMaster asks one sentinel for the master's settings and the
// replicas it knows.
func (s *Store) sentinelMaster(ctx context.Context, addr string) (map[string]string, []map[string]string, error) {
	fo := s.sentinel
	sc := redis.NewSentinelClient(s.direct(addr, fo.SentinelUsername, fo.SentinelPassword))
	defer sc.Close()
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	m, err := sc.Master(ctx, fo.MasterName).Result()
	if err != nil {
		return nil, nil, err
	}
	reps, err := sc.Replicas(ctx, fo.MasterName).Result()
	return m, reps, err
}
