--------------------------- MODULE LeaseFailover ---------------------------
EXTENDS Integers

\* Lease.tla's handoff over a store that fails over. The leader renews on the
\* old master until that master is cut off from its replicas and sentinels
\* (Cut) and for at most MaxLag seconds after (min-replicas-max-lag); it
\* reaches no other master. Detect seconds after the cut, the master the
\* standby reads comes back under a new identity (Rollback) holding any state
\* the old master held up to the cut: a promoted replica, or a restarted or
\* restored server. With Rule, the standby keys its age on the record and the
\* identity of the server that answered, and takes a released record at once
\* only when it saw the release happen under that identity; without it, it
\* keys on the record alone and takes any released record at once.
\* Times are in seconds; clock counts to the cut, then from it.

CONSTANTS LeaseSpan, MaxLag, Detect, Rule

ASSUME /\ LeaseSpan \in Nat \ {0}
       /\ MaxLag \in Nat
       /\ Detect \in Nat
       /\ Rule \in BOOLEAN

Retry == 5
Renew == 20
StopWait == 10
PollLow == 5
PollHigh == 11
\* The cut comes by then: late enough for every phase of the leader's
\* renewals and of the standby's polls to meet it.
CutMax == Retry + PollHigh
\* From this long after the cut on, the old master takes no write and the
\* rollback has happened: the clock stops there.
Settle == IF MaxLag + 1 > Detect THEN MaxLag + 1 ELSE Detect
None == -1
\* Renewals Retry apart up to the cut, a release and an acquisition.
MaxTop == 3 + CutMax \div Retry

\* The old master's records are versions 0..top: 0 is the release that
\* preceded the leader's tenure (it acquired over a released record), 1..top
\* the leader's renewals, except relVer, the leader's own release, and top
\* when taken, the standby's acquisition. After the cut nobody but the
\* leader reads the old master: its later versions are not counted.
VARIABLES clock, top, relVer, taken, cut, frozen, rolled,
          leader, remaining, signalled, oldAlive, leaving,
          standby, seen, seenId, age, witnessed, pollLeft, newAlive

vars == <<clock, top, relVer, taken, cut, frozen, rolled,
          leader, remaining, signalled, oldAlive, leaving,
          standby, seen, seenId, age, witnessed, pollLeft, newAlive>>

Released(v) == v = 0 \/ v = relVer
LeaderHolds == ~taken /\ top /= relVer
\* The old master takes the leader's writes until MaxLag after the cut.
Accepts == ~cut \/ clock <= MaxLag
\* The standby reaches the old master before the cut, the new one after the
\* rollback, and no master in between.
Reachable == ~cut \/ rolled
Current == IF rolled THEN frozen ELSE top
Ident == IF rolled THEN 1 ELSE 0

TypeOK ==
    /\ clock \in 0..(IF CutMax > Settle THEN CutMax ELSE Settle)
    /\ top \in 1..MaxTop
    /\ relVer \in 0..MaxTop
    /\ frozen \in 0..MaxTop
    /\ leader \in {"Retry", "Renew", "Stopping", "Done"}
    /\ remaining \in 0..Renew
    /\ standby \in {"Poll", "Check", "Acquired", "Callback", "Running"}
    /\ seen \in {None} \cup 0..MaxTop
    /\ seenId \in 0..1
    /\ age \in 0..LeaseSpan
    /\ pollLeft \in 0..PollHigh
    /\ \A value \in {taken, cut, rolled, signalled, oldAlive, leaving, witnessed, newAlive} :
           value \in BOOLEAN

\* The incumbent runs; its renewal committed at time 0 and it saw the reply
\* at once (ReplyMax 0: the implementation anchors at the send).
Init ==
    /\ clock = 0
    /\ top = 1
    /\ relVer = 0
    /\ taken = FALSE
    /\ cut = FALSE
    /\ frozen = 0
    /\ rolled = FALSE
    /\ leader = "Retry"
    /\ remaining = Retry
    /\ signalled = FALSE
    /\ oldAlive = TRUE
    /\ leaving = FALSE
    /\ standby = "Poll"
    /\ seen = None
    /\ seenId = 0
    /\ age = 0
    /\ witnessed = FALSE
    /\ pollLeft = 0
    /\ newAlive = FALSE

\* The renewal after the pause commits on the old master.
Commit ==
    /\ leader = "Retry"
    /\ remaining = 0
    /\ Accepts
    /\ LeaderHolds
    /\ top' = IF cut THEN top ELSE top + 1
    /\ remaining' = Retry
    /\ UNCHANGED <<clock, relVer, taken, cut, frozen, rolled, leader,
                   signalled, oldAlive, leaving, standby, seen, seenId, age,
                   witnessed, pollLeft, newAlive>>

\* The renewal after the pause fails, and so does every attempt for Renew.
BeginRenew ==
    /\ leader = "Retry"
    /\ remaining = 0
    /\ leader' = "Renew"
    /\ remaining' = Renew
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, signalled,
                   oldAlive, leaving, standby, seen, seenId, age, witnessed,
                   pollLeft, newAlive>>

Cancel ==
    /\ leader = "Renew"
    /\ remaining = 0
    /\ leader' = "Stopping"
    /\ remaining' = StopWait
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, signalled,
                   oldAlive, leaving, standby, seen, seenId, age, witnessed,
                   pollLeft, newAlive>>

\* At the end of the pause, before the cut, the leader hands the lease over
\* instead: it stops its unit, then releases.
Leave ==
    /\ leader = "Retry"
    /\ remaining = 0
    /\ ~cut
    /\ leader' = "Stopping"
    /\ remaining' = StopWait
    /\ leaving' = TRUE
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, signalled,
                   oldAlive, standby, seen, seenId, age, witnessed, pollLeft,
                   newAlive>>

Signal ==
    /\ leader = "Stopping"
    /\ ~signalled
    /\ signalled' = TRUE
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, leader,
                   remaining, oldAlive, leaving, standby, seen, seenId, age,
                   witnessed, pollLeft, newAlive>>

Reap ==
    /\ leader = "Stopping"
    /\ signalled
    /\ oldAlive
    /\ oldAlive' = FALSE
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, leader,
                   remaining, signalled, leaving, standby, seen, seenId, age,
                   witnessed, pollLeft, newAlive>>

\* A leader that hands over writes a released record once its unit is gone.
Release ==
    /\ leader = "Stopping"
    /\ leaving
    /\ ~oldAlive
    /\ Accepts
    /\ LeaderHolds
    /\ top' = top + 1
    /\ relVer' = top + 1
    /\ leader' = "Done"
    /\ remaining' = 0
    /\ UNCHANGED <<clock, taken, cut, frozen, rolled, signalled, oldAlive,
                   leaving, standby, seen, seenId, age, witnessed, pollLeft,
                   newAlive>>

\* The loop returns without releasing (or the release failed).
Return ==
    /\ leader = "Stopping"
    /\ ~oldAlive
    /\ leader' = "Done"
    /\ remaining' = 0
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, signalled,
                   oldAlive, leaving, standby, seen, seenId, age, witnessed,
                   pollLeft, newAlive>>

\* The old master is cut off from its replicas and sentinels. The replica to
\* be promoted holds the state as of now or an earlier one (replication lag,
\* or a backup).
Cut ==
    /\ ~cut
    /\ cut' = TRUE
    /\ clock' = 0
    /\ frozen' \in 0..top
    /\ UNCHANGED <<top, relVer, taken, rolled, leader, remaining,
                   signalled, oldAlive, leaving, standby, seen, seenId, age,
                   witnessed, pollLeft, newAlive>>

\* Detect after the cut, the standby's store comes back under a new
\* identity, holding that earlier state.
Rollback ==
    /\ cut
    /\ ~rolled
    /\ clock = Detect
    /\ rolled' = TRUE
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, leader, remaining,
                   signalled, oldAlive, leaving, standby, seen, seenId, age,
                   witnessed, pollLeft, newAlive>>

\* A changed record, or with Rule an answer from another server, restarts
\* the age; a change seen under the same server witnesses what it shows.
Observe ==
    /\ standby = "Poll"
    /\ pollLeft = 0
    /\ Reachable
    /\ LET changed == Current /= seen \/ (Rule /\ Ident /= seenId)
       IN /\ age' = IF changed THEN 0 ELSE age
          /\ witnessed' = IF changed THEN seen /= None /\ Ident = seenId ELSE witnessed
    /\ seen' = Current
    /\ seenId' = Ident
    /\ standby' = "Check"
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, leader,
                   remaining, signalled, oldAlive, leaving, pollLeft, newAlive>>

\* No master answers: the read fails and the age goes on.
Miss ==
    /\ standby = "Poll"
    /\ pollLeft = 0
    /\ ~Reachable
    /\ pollLeft' \in PollLow..PollHigh
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, leader,
                   remaining, signalled, oldAlive, leaving, standby, seen,
                   seenId, age, witnessed, newAlive>>

\* The compare-and-set would find the record seen (with Rule, on the server
\* that showed it), and it is old enough or a release the standby may take.
Ready ==
    /\ Reachable
    /\ seen = Current
    /\ (~Rule \/ seenId = Ident)
    /\ (age = LeaseSpan \/ (Released(seen) /\ (~Rule \/ witnessed)))

Defer ==
    /\ standby = "Check"
    /\ ~Ready
    /\ standby' = "Poll"
    /\ pollLeft' \in PollLow..PollHigh
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, leader,
                   remaining, signalled, oldAlive, leaving, seen, seenId, age,
                   witnessed, newAlive>>

\* On the old master the standby's record is its next version; on the new
\* master nobody reads it again in this module.
Acquire ==
    /\ standby = "Check"
    /\ Ready
    /\ top' = IF rolled THEN top ELSE top + 1
    /\ taken' = ~rolled
    /\ age' = 0
    /\ standby' = "Acquired"
    /\ UNCHANGED <<clock, relVer, cut, frozen, rolled, leader, remaining,
                   signalled, oldAlive, leaving, seen, seenId, witnessed,
                   pollLeft, newAlive>>

Start ==
    /\ standby = "Acquired"
    /\ standby' = "Callback"
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, leader,
                   remaining, signalled, oldAlive, leaving, seen, seenId, age,
                   witnessed, pollLeft, newAlive>>

Spawn ==
    /\ standby = "Callback"
    /\ standby' = "Running"
    /\ newAlive' = TRUE
    /\ UNCHANGED <<clock, top, relVer, taken, cut, frozen, rolled, leader,
                   remaining, signalled, oldAlive, leaving, seen, seenId, age,
                   witnessed, pollLeft>>

Done == leader = "Done" /\ standby = "Running"

\* Deadlines, local callbacks, the cut's latest time and the rollback run
\* before the next one-second clock step.
Urgent ==
    \/ (leader \in {"Retry", "Renew"} /\ remaining = 0)
    \/ (leader = "Stopping" /\ (~signalled \/ ~oldAlive \/ remaining = 0))
    \/ (standby = "Poll" /\ pollLeft = 0)
    \/ standby \in {"Check", "Acquired", "Callback"}
    \/ (~cut /\ clock = CutMax)
    \/ (cut /\ ~rolled /\ clock = Detect)

Tick ==
    /\ ~Done
    /\ ~Urgent
    /\ clock' = IF cut /\ clock = Settle THEN clock ELSE clock + 1
    /\ remaining' = IF leader \in {"Retry", "Renew", "Stopping"} THEN remaining - 1 ELSE remaining
    /\ age' = IF standby = "Poll" /\ age < LeaseSpan THEN age + 1 ELSE age
    /\ pollLeft' = IF standby = "Poll" THEN pollLeft - 1 ELSE pollLeft
    /\ UNCHANGED <<top, relVer, taken, cut, frozen, rolled, leader,
                   signalled, oldAlive, leaving, standby, seen, seenId,
                   witnessed, newAlive>>

Next ==
    \/ Commit
    \/ BeginRenew
    \/ Cancel
    \/ Leave
    \/ Signal
    \/ Reap
    \/ Release
    \/ Return
    \/ Cut
    \/ Rollback
    \/ Observe
    \/ Miss
    \/ Defer
    \/ Acquire
    \/ Start
    \/ Spawn
    \/ Tick
    \/ (Done /\ UNCHANGED vars)

Spec ==
    /\ Init
    /\ [][Next]_vars
    /\ WF_vars(Commit)
    /\ WF_vars(BeginRenew)
    /\ WF_vars(Cancel)
    /\ WF_vars(Leave)
    /\ WF_vars(Signal)
    /\ WF_vars(Reap)
    /\ WF_vars(Release)
    /\ WF_vars(Return)
    /\ WF_vars(Cut)
    /\ WF_vars(Rollback)
    /\ WF_vars(Observe)
    /\ WF_vars(Miss)
    /\ WF_vars(Defer)
    /\ WF_vars(Acquire)
    /\ WF_vars(Start)
    /\ WF_vars(Spawn)
    /\ WF_vars(Tick)

ProcessExclusion == ~(oldAlive /\ newAlive)

Handoff == <>Done

=============================================================================
