//go:build linux

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
	vmtests "github.com/unitlease/unitlease/vm-tests"
)

// sentinelOptions is the replicated Redis of the Sentinel scenarios: a
// master with two replicas, each refusing writes once no replica has
// acknowledged within a second (min-replicas-max-lag 1), watched by three
// sentinels that call a master down after 4 s. That meets the split brain
// bound the daemons check at start (max-lag + 2 s <= down-after - 1 s).
var sentinelOptions = redistest.SentinelOptions{
	Replicas: 2, Sentinels: 3, DownAfter: 4 * time.Second, FailoverTimeout: 10 * time.Second,
	MinReplicas: 1, MaxLag: 1, Server: redistest.Options{AppendOnly: true},
}

// runSentinel starts the Sentinel scenarios' Redis with a proxy in front
// of every data server, through which the sentinels, the replicas and the
// daemons all reach it: cutting one isolates that server.
func runSentinel(dir string) (*redistest.Sentinel, map[string]*vmtests.Proxy) {
	fronts := map[string]*vmtests.Proxy{}
	opts := sentinelOptions
	opts.Front = func(addr string) int {
		p, err := vmtests.NewProxy(addr)
		if err != nil {
			logf("proxy in front of %s: %v", addr, err)
			os.Exit(1)
		}
		fronts[addr] = p
		port, _ := strconv.Atoi(p.Addr()[strings.LastIndex(p.Addr(), ":")+1:])
		return port
	}
	return redistest.RunSentinel(dir, opts), fronts
}

// sentinelTiming gives the leader a renew deadline longer than a failover
// takes (down-after, the sentinels' election, the promotion and the
// clients' switch: about 8 s here), so that it rides through one.
func sentinelTiming(t *policy.Timing) { t.RenewDeadline = max(t.RenewDeadline, 12*time.Second) }

// leaseKey is the lease's key as the daemons write it.
func (s *session) leaseKey() string { return "unitlease:lease:" + s.lease }

// waitRenewed waits until the leader still holds the lease and has
// renewed it twice since version before, with no copy stopping.
func (s *session) waitRenewed(leader *vmtests.Node, before uint64, what string) error {
	return s.waitFor(what, func(on []*vmtests.Node) bool {
		st := vmtests.LeaseStatus(s.ctx, leader)
		return len(on) == 1 && on[0] == leader && st.Holding && st.Version >= before+2
	})
}

// waitWhole waits until the master has every replica online again.
func (s *session) waitWhole() error {
	return s.waitFor("every replica online again", func([]*vmtests.Node) bool {
		return strings.Count(s.sent.Master().Command("INFO", "replication"), ",state=online,") == len(s.sent.Servers)-1
	})
}

// faultEverysec: the AOF keeps the writes up to a mark; the leader renews
// twice more; Redis crashes and loses those renewals. The leader's next
// renewal finds its own earlier record (under a new server) and renews
// over it: it rides through, unless the restart outlasted its renew
// deadline and a peer took over.
func faultEverysec(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	mark := s.redis.AOFEnd()
	before := vmtests.LeaseStatus(s.ctx, leader).Version
	if err := s.waitRenewed(leader, before, "two renewals after the mark"); err != nil {
		return err
	}
	after := vmtests.LeaseStatus(s.ctx, leader).Version
	r.Fault = monotonic()
	s.redis.CrashBackTo(mark)
	return s.waitFor("the leader renewing after the rollback, or a peer taking over", func(on []*vmtests.Node) bool {
		if len(on) == 1 && on[0] != leader {
			return true
		}
		st := vmtests.LeaseStatus(s.ctx, leader)
		return len(on) == 1 && st.Holding && st.Version >= after+2
	})
}

// faultRollbackHandoff: a handoff, then a crash that keeps the old
// holder's release and loses the new holder's acquisition. Nobody may
// take the released record at once: the new holder runs its copy until
// its next renewal finds the release and stops it. Everyone ages the
// record under the restarted server for a lease span.
func faultRollbackHandoff(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	if _, err := s.runIn(leader, "unitlease", "handoff", s.lease); err != nil {
		return err
	}
	if err := s.waitMoved(leader); err != nil {
		return err
	}
	cmds, marks := s.redis.AOFCommands()
	cut := redistest.AOFMark(-1)
	for i, c := range cmds {
		if len(c) >= 3 && strings.EqualFold(c[0], "SET") && c[1] == s.leaseKey() && strings.Contains(c[2], `"state":"released"`) {
			cut = marks[i]
		}
	}
	if cut < 0 {
		return fmt.Errorf("no release of %s in the AOF", s.leaseKey())
	}
	r.Fault = monotonic()
	s.redis.CrashBackTo(cut)
	return s.waitRestarted(r.Fault)
}

// faultReset: something writes garbage into the lease key; the operator
// runs `unitlease reset` on a standby at once. The leader loses the
// lease at its next renewal and stops; the reset's released record
// released nothing, so it is aged for a lease span like any value.
func faultReset(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	standby := s.others(leader)[0]
	r.Fault = monotonic()
	s.redis.Command("SET", s.leaseKey(), "not a record")
	if out, err := s.runIn(standby, "unitlease", "reset", s.lease); err != nil {
		return fmt.Errorf("unitlease reset: %w: %s", err, out)
	}
	return s.waitRestarted(r.Fault)
}

// faultSentinelMasterKilled: the master dies; the sentinels promote a
// replica; the leader renews its own record there and its copy runs on.
func faultSentinelMasterKilled(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	old := s.sent.Master()
	before := vmtests.LeaseStatus(s.ctx, leader).Version
	r.Fault = monotonic()
	old.Stop()
	now := s.sent.AwaitNewMaster(old)
	r.BoundParts = fmt.Sprintf("replica promoted %v after the kill", (monotonic() - r.Fault).Round(100*time.Millisecond))
	if err := s.waitRenewed(leader, before, "the leader renewing on the promoted replica"); err != nil {
		return err
	}
	if got := now.Command("GET", s.leaseKey()); !strings.Contains(got, `"holder":"`+leader.Name+`"`) {
		s.problem("the promoted master holds %q, not %s's record", got, leader.Name)
	}
	s.sent.Rejoin(old)
	return s.waitWhole()
}

// faultSentinelReplicaDown: a replica dies; the master keeps the other
// (min-replicas-to-write 1) and nothing else changes.
func faultSentinelReplicaDown(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	master := s.sent.Master()
	var replica *redistest.Server
	for _, srv := range s.sent.Servers {
		if srv != master {
			replica = srv
			break
		}
	}
	before := vmtests.LeaseStatus(s.ctx, leader).Version
	r.Fault = monotonic()
	replica.Stop()
	port := strconv.Itoa(replica.FrontPort())
	if err := s.waitFor("the sentinels seeing the replica down", func([]*vmtests.Node) bool {
		out := s.sent.Sentinels[0].Command("SENTINEL", "REPLICAS", s.sent.Name)
		i := strings.Index(out, "\n"+port+"\n")
		return i >= 0 && strings.Contains(out[i:], "s_down")
	}); err != nil {
		return err
	}
	if err := s.waitRenewed(leader, before, "the leader renewing with a replica down"); err != nil {
		return err
	}
	s.sent.Rejoin(replica)
	return s.waitWhole()
}

// faultSentinelSplitBrain: the master is cut off from everyone but the
// leader, which goes on renewing there until the master refuses writes
// (no replica acknowledged within min-replicas-max-lag), while the
// sentinels promote a replica. The leader follows the sentinels to it and
// renews its own record there; the standbys, which read the new master
// under a new identity, age from then: nobody acquires, the copy runs on.
func faultSentinelSplitBrain(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	old := s.sent.Master()
	front := s.fronts[old.Addr()]
	r.Fault = monotonic()
	front.CutExcept(leader.Runs)
	now := s.sent.AwaitNewMaster(old)
	r.BoundParts = fmt.Sprintf("replica promoted %v after the cut", (monotonic() - r.Fault).Round(100*time.Millisecond))
	promoted := recordVersion(now.Command("GET", s.leaseKey()))
	err := s.waitFor("the leader renewing on the promoted replica", func(on []*vmtests.Node) bool {
		got := now.Command("GET", s.leaseKey())
		return len(on) == 1 && on[0] == leader && strings.Contains(got, `"holder":"`+leader.Name+`"`) && recordVersion(got) > promoted
	})
	front.Heal()
	if err != nil {
		return err
	}
	return s.waitWhole()
}

// recordVersion is the version of a lease record as redis-cli prints it,
// 0 if there is none.
func recordVersion(raw string) uint64 {
	_, rest, ok := strings.Cut(raw, `"version":`)
	if !ok {
		return 0
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	v, _ := strconv.ParseUint(rest[:end], 10, 64)
	return v
}

// faultSentinelLagging: the replicas stop copying (frozen, their links
// cut); the master takes writes without them (min-replicas-to-write 0
// for the fault); a handoff moves the copy; then the master dies and a
// replica without the handoff is promoted. The new holder's renewal
// finds the old holder's record there and stops its copy; every node
// ages that record under the new master for a lease span.
func faultSentinelLagging(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	master := s.sent.Master()
	s.sent.SetAll("min-replicas-to-write", "0")
	var replicas []*redistest.Server
	for _, srv := range s.sent.Servers {
		if srv != master {
			srv.Freeze()
			replicas = append(replicas, srv)
		}
	}
	master.Command("CLIENT", "KILL", "TYPE", "replica")
	if _, err := s.runIn(leader, "unitlease", "handoff", s.lease); err != nil {
		return err
	}
	if err := s.waitMoved(leader); err != nil {
		return err
	}
	r.Fault = monotonic()
	master.Stop()
	for _, srv := range replicas {
		srv.Thaw()
	}
	s.sent.AwaitNewMaster(master)
	if err := s.waitRestarted(r.Fault); err != nil {
		return err
	}
	s.sent.Rejoin(master)
	s.sent.SetAll("min-replicas-to-write", strconv.Itoa(sentinelOptions.MinReplicas))
	return s.waitWhole()
}
