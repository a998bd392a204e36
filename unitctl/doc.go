// Package unitctl is the only code of unitlease that talks to systemd. Over
// D-Bus (go-systemd v22 for method calls and job results, godbus v5 for
// unit events) it finds the units annotated with [X-UnitLease], validates
// them, writes the runtime drop-ins that make them safe to manage, starts
// and stops them with confirmation, and watches them.
//
// # What it promises
//
//   - Stop returns nil only once systemd reports the unit inactive or failed
//     with no job queued and no process is left in its cgroup
//     (GetUnitProcesses): systemd reports a unit failed even when a process
//     survived its final SIGKILL, and then Stop sends SIGKILL to the whole
//     cgroup again until it is empty. SIGKILL goes to the whole cgroup
//     KillMargin before stopWait runs out. Any error means the stop is not
//     confirmed; the error wraps ErrStopFailed once stopWait has run out and
//     a listing of the cgroup after a SIGKILL systemd answered still shows
//     processes (it lists them). A systemd slow to answer is asked again
//     for as long as ctx lasts: a busy systemd is never a failed stop. The
//     caller must not release the lease on any error.
//   - Start returns nil only once the unit is active and the start job is
//     done; a failed start is a *JobError with the job result, the state and
//     the service's Result=.
//   - A D-Bus NoReply, a dropped connection or a systemd re-exec is retried
//     (re-dialling with a bounded backoff) and the state is read again. It is
//     never reported as a result.
//   - Discover reads the files that systemd reports for each unit
//     (FragmentPath, DropInPaths) and parses them the way systemd applies
//     them. A malformed annotation is an *AnnotationError that names the
//     file and line; that unit is left out and the others are not.
//   - Install writes the drop-ins of a batch, reloads systemd once, and
//     checks that each drop-in is in effect as written; Recheck and Verify
//     check it again. A protection that is defeated is a *DropInError
//     (ErrDropIn) that names the value and the file and line that set it,
//     read from the unit's files in systemd's order; a refusal names the
//     file and line of a setting of the unit's own files the same way.
//
// # What it does not promise
//
//   - Processes that leave the unit's cgroup (a job handed to another
//     daemon, a systemd-run) are not stopped.
//   - The drop-ins live in /run and are gone after a reboot. Enabled units
//     are refused for that reason: they would start at boot without the
//     guard.
//   - Watch reports a state that lasts. A state that comes and goes between
//     two reads can be missed when events are lost (a reconnect).
//   - Only .service units are managed.
//   - Once the daemon is gone, systemd alone stops the unit within stop_wait
//     only if its processes die of SIGKILL. And a unit without ExecStop= or
//     ExecStopPost= that keeps KillMode=control-group can take up to twice
//     the stop budget: when its main process exits late in the SIGTERM
//     phase while another process ignores SIGTERM, systemd's final SIGTERM
//     phase waits TimeoutStopSec= again (KillMode=mixed has no such wait).
//   - The stop phases, FinalKillSignal= and TimeoutStopFailureMode= are not
//     pinned by the drop-in: a later edit of the unit (an ExecStop= added)
//     takes effect, and is reported (ErrDropIn) only when the drop-in is
//     verified again.
//
// # Management rules (Validate)
//
// A unit is refused if any of these holds: it is not a .service; it is not
// loaded; KillMode is process or none (mixed is accepted: SIGTERM goes to
// the main process and SIGKILL to the whole cgroup, so the cgroup still
// ends empty); SendSIGKILL=no; Type=oneshot without RemainAfterExit=yes;
// RefuseManualStart= or RefuseManualStop=; it is enabled (UnitFileState
// enabled, enabled-runtime, linked or linked-runtime: systemd is asked
// for it unless a scan of the unit directories, ScanLinks, found no link
// that could tie the unit); another unit pulls it
// in through Wants=, Requires=, Upholds= or BindsTo=, or starts it through
// OnFailure= or OnSuccess=, or a socket, timer or path unit triggers it;
// it has a BusName= (D-Bus activation); FinalKillSignal= is not SIGKILL; TimeoutStopFailureMode=abort;
// its stop has more phases than fit the stop budget (StopWait minus
// KillMargin) at MinStopPhase each. The phases are those systemd bounds one
// by one with TimeoutStopSec=: each ExecStop= command, the SIGTERM phase,
// each ExecStopPost= command, and the final SIGTERM phase (for a unit with
// ExecStopPost=, or with ExecStop= and KillMode=control-group), each late
// by up to 250ms of systemd's timer slack. A TimeoutStopSec= longer than a
// phase's share is not refused: the drop-in lowers it, and the Plan's
// warnings say so. Restart= is allowed: a stop job is never followed by an
// automatic restart, and a restart after a crash on the holder runs the
// guard again.
//
// # The drop-in
//
// DropInPath(unit) (/run/systemd/system/UNIT.d/zz-unitlease.conf) holds:
// BindsTo= and After= on the daemon's unit, so that systemd stops the unit
// when the daemon stops, dies or is killed by its watchdog (rule 6).
// ExecStartPre= is reset, then the guard runs first, then the unit's
// own ExecStartPre= commands, re-rendered. TimeoutStopSec= is each stop
// phase's share of the budget, so that systemd alone, once the daemon is
// gone, stops the unit within stop_wait whatever ExecStop= and
// ExecStopPost= commands it has; KillMode= and SendSIGKILL=yes are pinned
// to the validated values. Install verifies these, and that
// FinalKillSignal= is still SIGKILL and TimeoutStopFailureMode= not abort.
// Its name sorts after "override.conf" and numbered drop-ins, which
// systemd applies first (see DropInName). README.md in this directory
// gives the reasons, the tests and the measured figures.
package unitctl
