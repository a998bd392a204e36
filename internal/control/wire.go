// Package control is the daemon's control socket: the wire format of its
// requests and answers, the server, and the client that `unitlease
// status`, `handoff` and `guard` use. The socket is root's only (mode 0600
// in a 0700 directory); requests are HTTP over it, answers JSON.
//
// The server answers through the Service interface, which the daemon
// satisfies; this package imports nothing of unitlease.
package control

import (
	"context"
	"time"
)

// SocketPath is the control socket: root only (mode 0600 in a 0700
// directory). status, handoff and guard talk to the daemon through it.
const SocketPath = "/run/unitlease/control.sock"

// Service is what the control socket serves: the daemon.
type Service interface {
	// Snapshot is this node's leases and the cluster's view.
	Snapshot(ctx context.Context) Snapshot
	// Handoff hands target (a lease or a unit) to a peer (to, if not
	// "") and returns who took it.
	Handoff(ctx context.Context, target, to string) (HandoffResult, error)
	// Drain hands every lease this node holds to a ready peer (stopping
	// the ones none is ready for only if stop) and keeps the node from
	// taking any until Undrain; it persists across restarts.
	Drain(ctx context.Context, stop bool) (DrainResult, error)
	// Undrain lets the node take leases again.
	Undrain(ctx context.Context) (DrainResult, error)
	// Guard returns nil if unit may start on this node now. Over the
	// socket, ctx carries the caller (PeerOf).
	Guard(ctx context.Context, unit string) error
}

// Schema is the version of Snapshot's JSON (`unitlease status --json`):
// it changes when a field is renamed, removed or changes meaning; new
// fields may be added within a version.
const Schema = 1

// Snapshot is this node's view and the cluster's.
type Snapshot struct {
	Schema  int           `json:"schema"` // Schema
	Node    string        `json:"node"`
	Leases  []LeaseStatus `json:"leases"`
	Cluster []ClusterRow  `json:"cluster"`
	Errors  []string      `json:"errors,omitempty"` // config errors, Redis trouble
	Timing  TimingSummary `json:"timing"`
	// Drained: this node is drained (it takes no lease).
	Drained bool `json:"drained"`
	// DrainedNodes are the nodes that announce they are drained, this
	// one included.
	DrainedNodes []string `json:"drained_nodes,omitempty"`
	// DisabledLeases are the leases an operator disabled cluster-wide.
	DisabledLeases []DisabledLease `json:"disabled_leases,omitempty"`
	// Problems are the units this node refused or could not read the
	// annotation of, with the reason: not managed here (or, for a unit of
	// a lease it manages, that lease is ineligible here).
	Problems []UnitProblem `json:"problems,omitempty"`
}

// UnitProblem is a unit the daemon refused or could not read.
type UnitProblem struct {
	Unit  string `json:"unit"`
	Lease string `json:"lease,omitempty"` // "" when the annotation could not be read
	Kind  string `json:"kind"`            // refused, annotation, drop-in
	Msg   string `json:"msg"`
}

// LeaseStatus is one lease on this node: its supervisor's state and its
// units' states.
type LeaseStatus struct {
	Lease string   `json:"lease"`
	Units []string `json:"units"`
	Node  string   `json:"node"`
	Role  string   `json:"role"` // the policy state: leader, standby, ...
	// Holding: this node holds the lease (it renews it and will release it).
	Holding bool   `json:"holding"`
	Holder  string `json:"holder,omitempty"`
	Version uint64 `json:"version,omitempty"`
	// LeaseAge: for a standby, how long the record has been unchanged;
	// for a holder, the time since its last successful renewal was sent.
	LeaseAge time.Duration `json:"lease_age_ns"`
	// DeadlineLeft: for a holder, the time left before it must stop.
	DeadlineLeft time.Duration `json:"deadline_left_ns,omitempty"`
	// Reason is the last journal event and why the node last stopped.
	Reason string `json:"reason"`
	// UnitStates is each unit's ActiveState, read for the snapshot.
	UnitStates []string  `json:"unit_states,omitempty"`
	Since      time.Time `json:"since"` // wall clock, for display only
	// Failures are the units' failures on this node within the lease's
	// FailureWindow=; Excluded, that they reached FailureThreshold= (the
	// node does not compete for the lease).
	Failures int  `json:"failures"`
	Excluded bool `json:"excluded"`
}

// ClusterRow is one lease as Redis has it.
type ClusterRow struct {
	Lease    string `json:"lease"`
	Holder   string `json:"holder,omitempty"`
	Version  uint64 `json:"version,omitempty"`
	State    string `json:"state"`    // held, released, missing, garbage
	Watchers int    `json:"watchers"` // daemons managing it
	Error    string `json:"error,omitempty"`
	// Next is the node a released record offers the lease to.
	Next string `json:"next,omitempty"`
	// Nodes is what each node that manages the lease announces of it:
	// ready, drained, excluded, ineligible, disabled.
	Nodes []NodeState `json:"nodes,omitempty"`
	// Token is the fencing token of the holder's tenure (the version it
	// acquired at), HeldFor how long it has held the lease, and Last the
	// lease's last change of holder, as the new holder noted it (absent
	// if none was noted).
	Token   uint64         `json:"token,omitempty"`
	HeldFor time.Duration  `json:"held_for_ns,omitempty"`
	Last    *TransitionRow `json:"last_transition,omitempty"`
	// Failures are the nodes' failure counts within the lease's window.
	Failures []NodeFailures `json:"failures,omitempty"`
	// Released is, for a released record, its holder's note of why it
	// released (absent if none was noted).
	Released *ReleaseRow `json:"last_release,omitempty"`
}

// ReleaseRow is a holder's note of a release: when (its clock), by
// which node, and why (the reasons of TransitionRow).
type ReleaseRow struct {
	At  time.Time `json:"at"`
	By  string    `json:"by"`
	Why string    `json:"why"`
}

// TransitionRow is a lease's last change of holder: when, from which
// node ("" for a missing key) to which, and why: crash (the holder
// stopped renewing), handoff, drain, failback, failure, disable, stop (its
// daemon stopped), sleep, unmanaged, ineligible, withdrawn, release (a
// release without a note), missing (no record: a first start, or Redis
// lost it).
type TransitionRow struct {
	At   time.Time `json:"at"`
	From string    `json:"from,omitempty"`
	To   string    `json:"to"`
	Why  string    `json:"why"`
}

// NodeFailures is one node's failure count of a lease.
type NodeFailures struct {
	Node  string `json:"node"`
	Count int    `json:"count"`
}

// DisabledLease is a lease `unitlease disable` disabled: by which node,
// and when (zero if its marker does not say).
type DisabledLease struct {
	Lease string    `json:"lease"`
	By    string    `json:"by,omitempty"`
	At    time.Time `json:"at"`
}

// NodeState is what one node announces of a lease.
type NodeState struct {
	Node  string `json:"node"`
	State string `json:"state"`
}

// TimingSummary is the timing in force.
type TimingSummary struct {
	LeaseSpan     time.Duration `json:"lease_span_ns"`
	Retry         time.Duration `json:"retry_ns"`
	RenewDeadline time.Duration `json:"renew_deadline_ns"`
	StopWait      time.Duration `json:"stop_wait_ns"`
}

// DrainResult says what a drain did with each lease this node held.
type DrainResult struct {
	Node    string         `json:"node"`
	Drained bool           `json:"drained"` // the node's state now
	Leases  []DrainOutcome `json:"leases,omitempty"`
}

// DrainOutcome is one lease's fate in a drain.
type DrainOutcome struct {
	Lease   string `json:"lease"`
	Outcome string `json:"outcome"` // handed_off, left_running, stopped, failed
	Holder  string `json:"holder,omitempty"`
	Msg     string `json:"msg,omitempty"`
}

// The outcomes of a drain.
const (
	DrainHandedOff   = "handed_off"
	DrainLeftRunning = "left_running"
	DrainStopped     = "stopped"
	DrainFailed      = "failed"
)

// HandoffResult says who took the lease.
type HandoffResult struct {
	Lease   string `json:"lease"`
	Holder  string `json:"holder"`
	Version uint64 `json:"version"`
}
