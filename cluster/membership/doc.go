// Package membership finds a cairn node's peers and decides how the raft
// configuration should follow them.
//
// It has three parts, wired together by the node (package cluster):
//
//   - Discovery gossips this node's Meta (ID, raft and gRPC addresses) with
//     hashicorp/memberlist and tracks every member's state: alive, dead
//     (failed) or left (gracefully), with the time each state began.
//   - Reconcile, a pure function, turns the gossip view, the raft
//     configuration and the followers' progress into configuration changes
//     (add a non-voter, promote, demote, remove, update an address). The
//     leader runs it in a loop woken by Discovery.Changes and a ticker;
//     Tracker carries the little history it needs from round to round.
//   - Applier applies the changes to *raft.Raft as a chain of
//     compare-and-set configuration changes.
//
// # Node metadata on the wire
//
// memberlist gossips at most MetaMaxSize (512) bytes of metadata per node;
// New refuses a Meta whose encoding is larger. Format version 1:
//
//	+---------+-------+----------------------+----------------------+----------------------+---------------+-------------+-----------
//	| version | flags | uvarint len | ID     | uvarint len | raft   | uvarint len | gRPC   | varint        | uvarint     | extension
//	| = 0x01  |       |             | bytes  |             | addr   |             | addr   | Version       | Incarnation | (ignored)
//	+---------+-------+----------------------+----------------------+----------------------+---------------+-------------+-----------
//	  1 byte    1 byte                                                                                         optional
//
//	flags: bit 0  leaving: the node announced a graceful leave (set by Leave)
//	       bit 1  non-voter: Meta.NonVoter
//	       bits 2-7 reserved: written as 0, ignored when read
//
// Lengths are unsigned LEB128 varints, Version a zig-zag varint
// (encoding/binary). Incarnation was added after the first release in the
// extension area: metadata that ends after Version has Incarnation 0, and
// older readers ignore it. ClusterID followed later, the same way: a
// uvarint length and the ID's bytes after Incarnation (metadata that ends
// before it has none). A reader rejects another version byte, a length
// running past the end, a malformed Incarnation or ClusterID, or a Meta
// that fails Validate (empty ID, a raft address that is not host:port,
// ...); it ignores bytes after ClusterID, which is where a later revision
// adds fields without a new version byte. Discovery refuses a member whose
// ClusterID is set and differs from its own (set) one: its alive messages
// are dropped and a push-pull with it is cancelled, on both sides
// (Config.OnRefuse reports it; Join returns ErrOtherCluster). A member whose
// metadata is rejected is logged and left out of Members.
//
// # Left or failed
//
// memberlist raises NotifyLeave both when a node leaves and when it is
// declared dead, and in memberlist (v0.6.0 and v0.7.0) the *Node it passes always has
// State == StateAlive (the real state is in a private field that shadows
// it; hashicorp/memberlist#293). Discovery.Leave therefore first gossips the
// leaving flag above and waits for that broadcast to finish, then calls
// memberlist's Leave; a peer that saw the flag records the NotifyLeave as
// StateLeft, any other as StateDead. Losing the flag errs on the safe side:
// the leaver is treated as failed and removed after the grace period.
//
// memberlist raises no event for a suspect node and exports no node state,
// so Discovery never reports StateSuspect.
//
// # Reconcile policy
//
// Reconcile's doc comment lists the rules. The reasoning behind the less
// obvious ones:
//
//   - Voters are made odd by promotion, never by demoting a healthy voter.
//     With V voters of which H are healthy, the cluster survives
//     H - (V/2 + 1) more failures (integer division). Promoting a ready
//     non-voter (V+1, H+1) gains one exactly when V is even, so a single
//     ready non-voter is not promoted onto an odd number of healthy voters:
//     it waits, a spare, until a second is ready and both are promoted.
//     Demoting a healthy voter (V-1, H-1) never gains anything: four voters
//     survive one failure, as three do. It only churns: in issue [ops2]
//     item 8(a) four voters were made three by demoting an original,
//     healthy voter (all were caught up, so the "least caught up" was the
//     lowest ID); four voters come about when five lose one, and when that
//     one came back, it and the demoted voter made a pair of ready
//     non-voters and were promoted again. So a set of healthy voters stays
//     even until a ready non-voter makes it odd; only the cap (MaxVoters)
//     demotes healthy voters. raft-autopilot's StablePromoter goes
//     further: it promotes every stable non-voter and never demotes. A
//     two-node cluster keeps one voter and one non-voter.
//   - A lost voter is replaced at once. A voter is lost when raft does not
//     reach it and either gossip says it is dead, left or unknown, or
//     raft reached it earlier in the leader's term (it has Progress, now
//     unhealthy or stale). A lost voter is not healthy, so a ready
//     non-voter is promoted in its place right away, during the lost
//     voter's grace period; and since demoting a lost voter (V-1, H) gains
//     one exactly when V is even, the next round demotes it (three voters,
//     one lost, and a spare: the spare makes three healthy of four, which
//     survive no failure, and demoting the lost one makes three of three,
//     which survive one). In issue [ops2] item 8(b) the cluster ran on two
//     of three voters for the whole grace period while a caught-up
//     non-voter waited. The lost server keeps its place as a non-voter: it
//     is removed when its grace period ends or, back from a restart, it is
//     the new spare (it does not get its vote back by seniority). This is
//     what the redundancy zones of Consul and Vault Enterprise autopilot
//     do (when a zone's voter fails, the zone's non-voter is promoted),
//     without the zones. Lost voters do not count towards the cap when
//     promoting, so at the cap the replacement takes the configuration
//     over it for a round. At most (V-1)/2 lost voters are demoted per
//     round, as for removals.
//     Lost is raft's judgement, not gossip's. A voter gossip says is dead
//     but raft reaches still votes (a UDP-only fault). A voter alive in
//     gossip that has not answered this leader yet is not lost: a new
//     leader has no Progress for anyone in its first rounds, and would
//     otherwise demote a follower of a four-voter cluster at every
//     election.
//   - Voters that are gone (left, failed past the grace period) do not
//     count towards parity or the cap either, so a gone voter that
//     MinQuorum keeps in the configuration is replaced too: a ready
//     non-voter is promoted, and the next round removes the gone voter.
//   - A round either changes suffrage in one direction or not at all:
//     demoting rounds do not promote, promoting rounds do not demote.
//     Removals and promotions are judged on the configuration at the start
//     of the round (no credit for this round's promotions).
//   - A failed server is not removed while raft still reaches it (Progress
//     Healthy with a fresh contact): gossip and raft use different ports and
//     protocols, and a UDP-only fault must not shrink the configuration.
//   - At most (V-1)/2 of V voters are removed per round, as raft-autopilot
//     does: a leader that can still commit has lost no more than that, so
//     a larger removal means the failure view is wrong.
//   - A server removed for leaving is not added back on the word of an
//     alive member of the same incarnation (Input.Departed): that is a
//     stale view of the run that left, held by a leader that has not yet
//     heard of the leave. The record is replicated by the caller (package
//     cluster, doc.go "Departed servers") so that every later leader has it.
//   - Raft refuses two servers with one address, so a member claiming the
//     raft address of a configured server waits until that server is gone
//     (left, or failed past the grace period and unreachable by raft), and
//     is then added (or its address updated) in the same round as the
//     removal, after it. The claim itself removes nothing, and does not
//     shorten the grace period: it is only gossip, and gossip takes no more
//     than the gossip encryption key. When claims did shorten it, a fake
//     member claiming a voter's address two seconds after the voter went
//     dead in gossip (a restart) had the voter removed; the voter was not
//     re-added when it came back. A claim only ranks the server it frees
//     ahead of other failed ones when not all can be removed in a round.
//   - Gossip does not prove that a member is a peer. With
//     Input.RequireVerified, only members the caller has verified (package
//     cluster, verify.go: over a connection the caller opened to the
//     member's advertised gRPC address, a TLS certificate naming the
//     member's ID or a proof of the peer token) are added, have their
//     address updated, claim an address or are promoted. An unverified
//     member can therefore neither join nor, by its claims, cause any
//     server's removal. Gossip about configured members is still taken as
//     it comes, with one check: a leave can be forged in another member's
//     name by anyone with the gossip key (memberlist accepts it until the
//     member refutes it), so a server whose member left is removed only
//     once raft no longer reaches it (a node that leaves stops its raft
//     right after). A forged NonVoter flag can still demote a voter, down
//     to MinQuorum, until the member refutes it.
//     Configured voters are not demoted or removed for being unverified: a
//     verification can fail for reasons of its own (a timeout, a new
//     leader that has not verified yet), and that must not shrink the
//     voters.
//   - At most Policy.MaxPendingNonVoters (DefaultMaxPendingNonVoters, 3,
//     unless set; negative for no cap) servers are pending at a time:
//     configured non-voters that are not ready (healthy, caught up, in
//     recent contact) and do not ask to stay non-voters (Meta.NonVoter). New
//     members beyond the room left wait, lowest ID first, until pending
//     ones become ready or are removed. Each new non-voter costs the leader
//     a snapshot and log replication; without the cap twelve fake members
//     holding only the gossip key were all added at once. Members asking to
//     stay non-voters are not counted and not held back: they are read
//     replicas an operator configured, and the cap is about joins on the
//     way to becoming voters. (The cap limits what fake members cost; it
//     does not keep them out. Only RequireVerified does.)
//
// Why not hashicorp/raft-autopilot (v0.3.0, compatible with raft v1.7.3)? Its
// decisions are interleaved with raft calls and goroutines, its stable
// promoter reads time.Now, and it has no grace period for failed servers or
// notion of missing ones; testing it needs sleeps or mocks of its internals.
// The rules above borrow its semantics (stabilization time, min quorum,
// removal cap, no promotion and demotion in one round, no demotion of
// healthy voters but for a cap) in a pure function instead. They differ
// where autopilot would leave a cluster less fault tolerant or churn it:
// autopilot promotes every stable non-voter (an even count of voters, and
// no spare left to replace a failed voter), and its dead-server cleanup
// (CleanupDeadServers) removes a server as soon as the application reports
// it failed, with no grace period of its own for a restart.
package membership
