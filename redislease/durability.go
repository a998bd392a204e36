package redislease

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Durability is what Redis promises about acknowledged writes. A lost one
// is safe (rules 7 and 8: the nodes see another server answer
// and age what it holds) but costs a lease span of waiting; the findings
// say what each setting costs.
type Durability struct {
	AppendOnly        string `json:"appendonly"`
	AppendFsync       string `json:"appendfsync"`
	Role              string `json:"role"`
	ConnectedReplicas int    `json:"connected_replicas"`
	// CanLoseAcked is true when a crash or failover can lose a write Redis
	// has acknowledged, or when that could not be determined.
	CanLoseAcked bool `json:"can_lose_acknowledged_writes"`
	// Findings explain CanLoseAcked, one sentence each.
	Findings []string `json:"findings"`
}

// Durability asks Redis how it persists and replicates: INFO persistence
// (appendonly) and replication, which the ACL unitlease needs allows, and
// appendfsync through CONFIG GET if the user may (the ACL unitlease
// ships does not grant it: CONFIG GET reads every setting, passwords
// included); without it the report assumes everysec and says so.
func (s *Store) Durability(ctx context.Context) Durability {
	d := Durability{CanLoseAcked: true}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	info, err := s.rdb.Info(ctx, "persistence", "replication").Result()
	if err != nil {
		d.Findings = append(d.Findings, fmt.Sprintf("could not read the persistence settings (INFO: %v); assume acknowledged writes can be lost", err))
		return d
	}
	fields := parseInfo(info)
	d.AppendOnly = map[string]string{"1": "yes", "0": "no"}[fields["aof_enabled"]]
	d.Role = fields["role"]
	d.ConnectedReplicas, _ = strconv.Atoi(fields["connected_slaves"])
	fsyncKnown := true
	if cfg, err := s.rdb.ConfigGet(ctx, "appendfsync").Result(); err == nil && cfg["appendfsync"] != "" {
		d.AppendFsync = cfg["appendfsync"]
	} else {
		d.AppendFsync, fsyncKnown = "everysec", false
	}
	d.CanLoseAcked = false
	lose := func(f string) { d.CanLoseAcked = true; d.Findings = append(d.Findings, f) }
	switch {
	case d.AppendOnly != "yes":
		lose("appendonly is " + orUnknown(d.AppendOnly) + ": a restart loses every write since the last snapshot; a leader whose key is gone stops its units, and they start elsewhere a lease span later (never sooner: every node ages a missing key); set appendonly yes")
	case !fsyncKnown:
		lose("appendonly is yes; appendfsync is not readable by this Redis user (it needs config|get, which would also let it read every setting), so it is taken as everysec: a crash can lose up to a second of acknowledged writes, which is safe and costs a lease span of waiting after a crash")
	case d.AppendFsync != "always":
		lose("appendfsync is " + plain(d.AppendFsync) + ": a crash can lose up to a second of acknowledged writes; that is safe (every node learns that another Redis process answers, leaders renew over their own earlier records, standbys age what they see for a lease span), and costs that wait after a crash; appendfsync always avoids it")
	}
	switch {
	case d.Role == "slave" || d.Role == "replica":
		lose("this is a replica: lease writes will fail; point url at the primary")
	case d.ConnectedReplicas > 0 && s.sentinel != nil:
		lose(fmt.Sprintf("%d replicas are attached and replication is asynchronous: a failover can lose acknowledged writes, which the nodes detect (another server answers) and wait out for a lease span; whether the old master stops taking writes in time is checked against the sentinels' settings", d.ConnectedReplicas))
	case d.ConnectedReplicas > 0:
		lose(fmt.Sprintf("%d replicas are attached and replication is asynchronous: a failover can lose acknowledged writes, which the nodes detect (the replica is another server) and wait out; promote a replica only once the old primary is stopped: one that still takes writes after the promotion can let two copies run", d.ConnectedReplicas))
	}
	if !d.CanLoseAcked {
		d.Findings = append(d.Findings, "appendonly yes, appendfsync always, no replicas: an acknowledged write survives a crash")
	}
	return d
}

// parseInfo reads INFO's "key:value" lines.
func parseInfo(info string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Info returns a section of Redis's INFO, for diagnostics and benchmarks.
func (s *Store) Info(ctx context.Context, section string) (string, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	return s.rdb.Info(ctx, section).Result()
}

// plain is s if it is printable ASCII, else quoted: a value a server
// answered goes into messages a terminal shows.
func plain(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return strconv.Quote(s)
		}
	}
	return s
}
