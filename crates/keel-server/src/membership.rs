//! `RAFT.MEMBER ADD` and `RAFT.MEMBER REMOVE`, with the rails that keep an operator from
//! breaking the cluster by accident.
//!
//! - ADD records the member's addresses through the log (every replica learns where it is
//!   reached), adds it as a learner, waits until its log is within `CatchUp::entries` of the
//!   leader's (at most `CatchUp::timeout`), and only then promotes it: a voter that is far behind
//!   would count toward quorums it cannot help form, so a cluster of three that adds a fourth
//!   empty voter could lose availability until it caught up. `CatchUp` comes from
//!   `--catch-up-entries` and `--catch-up-timeout-ms`.
//! - ADD ... CLIENT's addresses are a MEMBER ADDRS entry proposed before the membership change,
//!   kept by the state machine and its snapshots; the recorded peer addresses serve INFO, while
//!   the transport still learns peers from handshakes.
//! - A change that would leave the new configuration without a quorum of members that are up
//!   (answered the leader within an election timeout: the leader's
//!   `FollowerProgress::recently_active`) is refused; REMOVE takes `FORCE` to do it anyway (for
//!   example to drop members that are gone for good, one at a time).
//! - Every `-ERR` means nothing changed. A re-add of a voter changes nothing and says so; a learner
//!   this command added but could not promote is `-TRYAGAIN` (running it again promotes it); an
//!   outcome the node cannot know is `-TRYAGAIN outcome unknown`.
//! - The leader decides. On a follower the first step is refused as NotLeader, before anything
//!   changed, and the connection forwards the whole command to the leader.
//!
//! The rails read the leader's status and then act: they are a guard against operator mistakes,
//! not a mechanism safety depends on (the core refuses what would be unsafe, whatever is asked).

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use keel::{ClientError, NodeStatus, Role};

use super::{random_client_id, ServerContext};
use keel_redis::state_machine::MemberAddrs;
use keel_redis::ApplyReply;
use keel_redis::LogCommand;
use keel_redis::LoggedCommand;
use keel_redis::WriteReply;
use keel_resp::Reply;

/// How `RAFT.MEMBER ADD` waits for a new member before promoting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatchUp {
    /// Promote once the learner's log is at most this many entries behind the leader's.
    pub entries: u64,
    /// Give up (the learner stays a learner) after this long.
    pub timeout: Duration,
}

impl Default for CatchUp {
    fn default() -> Self {
        CatchUp {
            entries: 1_000,
            timeout: Duration::from_secs(60),
        }
    }
}

/// How often the catch-up wait looks at the leader's progress.
const CATCH_UP_POLL: Duration = Duration::from_millis(50);

#[expect(clippy::too_many_lines)]
pub(super) async fn add(
    ctx: &ServerContext,
    id: u64,
    peer_addr: String,
    learner: bool,
    client_addr: Option<String>,
) -> Result<Reply, ClientError> {
    let Some(addr) = tokio::net::lookup_host(peer_addr.as_str())
        .await
        .ok()
        .and_then(|mut a| a.next())
    else {
        return Ok(Reply::error(format!(
            "ERR cannot resolve peer address '{peer_addr}'"
        )));
    };
    // A re-add without CLIENT keeps the client address recorded before.
    let client_addr = client_addr.or_else(|| ctx.recorded_client_addr(id));
    let remember_addrs = || -> Result<(), ClientError> {
        ctx.peer_addrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, peer_addr.clone());
        match &client_addr {
            Some(client) => ctx.handle.set_client_addr(id, client),
            None => Ok(()),
        }
    };
    let client = client_addr.as_deref().unwrap_or("");
    let status = ctx.handle.status().await?;
    let leading = status.raft.role == Role::Leader;
    let membership = &status.raft.membership;
    // Only the leader's configuration is the one a change starts from; elsewhere the first step
    // below is refused as NotLeader (and forwarded) without changing anything.
    if leading && membership.is_voter(id) {
        if learner {
            return Ok(Reply::error(format!(
                "ERR node {id} is a voter: RAFT.MEMBER ADD never demotes one (nothing changed)"
            )));
        }
        record_addrs(ctx, id, &peer_addr, client).await?;
        remember_addrs()?;
        return Ok(Reply::Simple(
            format!("OK node {id} is already a voter").into(),
        ));
    }
    let already_learner = leading && membership.is_learner(id);
    // Recorded before the member joins, so that every replica knows where it is reached by the
    // time it is in the configuration (a follower elsewhere may forward to it as leader).
    record_addrs(ctx, id, &peer_addr, client).await?;
    if !already_learner {
        ctx.handle.add_learner(id, addr).await?;
    }
    remember_addrs()?;
    if learner {
        return Ok(if already_learner {
            Reply::Simple(format!("OK node {id} is already a learner").into())
        } else {
            Reply::OK
        });
    }
    // From here on a learner exists; a failure to promote it is worded so: `-ERR` only when this
    // command changed nothing (the learner was there before it).
    let not_promoted = |why: String| {
        Reply::error(if already_learner {
            format!("ERR node {id} stays a learner (nothing changed): {why}")
        } else {
            format!(
                "TRYAGAIN node {id} was added as a learner but not promoted: {why}; RAFT.MEMBER \
                 ADD again promotes it"
            )
        })
    };
    let status = match wait_caught_up(ctx, id).await {
        Ok(status) => status,
        Err(CatchUpFailure::Client(e)) => return Err(e),
        Err(CatchUpFailure::Behind(why)) => return Ok(not_promoted(why)),
    };
    let mut voters = status.raft.membership.voters.clone();
    voters.insert(id);
    if let Err(why) = quorum_of_live_members(&status, &voters) {
        return Ok(not_promoted(why));
    }
    match ctx.handle.promote(id).await {
        Ok(()) => Ok(Reply::OK),
        Err(ClientError::Unknown) => Err(ClientError::Unknown),
        Err(e) => Ok(not_promoted(e.to_string())),
    }
}

pub(super) async fn remove(
    ctx: &ServerContext,
    id: u64,
    force: bool,
) -> Result<Reply, ClientError> {
    let status = ctx.handle.status().await?;
    if status.raft.role == Role::Leader && !force {
        let mut voters = status.raft.membership.voters.clone();
        voters.remove(&id);
        if !voters.is_empty() {
            if let Err(why) = quorum_of_live_members(&status, &voters) {
                return Ok(Reply::error(format!(
                    "ERR removing node {id} refused (nothing changed): {why}; RAFT.MEMBER \
                     REMOVE {id} FORCE does it anyway"
                )));
            }
        }
    }
    ctx.handle.remove(id).await?;
    // Best effort: a stale record of a removed member misleads nobody (it is not in the
    // configuration) and is replaced if the id is added again.
    let _ = record_addrs(ctx, id, "", "").await;
    Ok(Reply::OK)
}

enum CatchUpFailure {
    Client(ClientError),
    Behind(String),
}

/// Waits until `id`'s log is within `CatchUp::entries` of the leader's; returns the leader's
/// status at that moment.
async fn wait_caught_up(ctx: &ServerContext, id: u64) -> Result<NodeStatus, CatchUpFailure> {
    let deadline = tokio::time::Instant::now() + ctx.catch_up.timeout;
    loop {
        let status = ctx.handle.status().await.map_err(CatchUpFailure::Client)?;
        if status.raft.role != Role::Leader {
            return Err(CatchUpFailure::Client(ClientError::NotLeader {
                leader: status.raft.leader,
                leader_addr: None,
            }));
        }
        let last = status.raft.last_log_id.index;
        let (matched, answering) = status
            .progress
            .iter()
            .find(|p| p.id == id)
            .map_or((0, false), |p| (p.match_index, p.recently_active));
        // A learner that has not answered is not caught up, however short the log.
        if answering && last.saturating_sub(matched) <= ctx.catch_up.entries {
            return Ok(status);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CatchUpFailure::Behind(format!(
                "it did not catch up within {} ms (its log ends at {matched}, the leader's at \
                 {last}; --catch-up-entries {}){}",
                ctx.catch_up.timeout.as_millis(),
                ctx.catch_up.entries,
                if answering {
                    ""
                } else {
                    "; it does not answer"
                }
            )));
        }
        tokio::time::sleep(CATCH_UP_POLL).await;
    }
}

/// Whether the members of `voters` that are up now (the leader, and every follower that answered
/// within an election timeout) form a majority of them.
fn quorum_of_live_members(status: &NodeStatus, voters: &BTreeSet<u64>) -> Result<(), String> {
    let leader = status.raft.id;
    let up: BTreeSet<u64> = voters
        .iter()
        .copied()
        .filter(|&v| {
            v == leader
                || status
                    .progress
                    .iter()
                    .any(|p| p.id == v && p.recently_active)
        })
        .collect();
    if up.len() > voters.len() / 2 {
        return Ok(());
    }
    let down: Vec<u64> = voters.difference(&up).copied().collect();
    Err(format!(
        "the new configuration's voters {voters:?} would have {} of {} up (down: {down:?}), \
         not a majority",
        up.len(),
        voters.len()
    ))
}

/// Proposes the record of `id`'s addresses (both empty: forget them) and waits until it applied.
async fn record_addrs(
    ctx: &ServerContext,
    id: u64,
    peer: &str,
    client: &str,
) -> Result<(), ClientError> {
    let record = LoggedCommand::MemberAddrs(MemberAddrs {
        id,
        peer: Bytes::copy_from_slice(peer.as_bytes()),
        client: Bytes::copy_from_slice(client.as_bytes()),
    });
    // A request id of its own: one record, never re-proposed.
    let entry = LogCommand::new(random_client_id(), 1, super::wall_clock_ms(), record).encode();
    let result = ctx.handle.propose(entry).await?;
    match ApplyReply::decode(&result) {
        Some(ApplyReply::Write(WriteReply::Ok)) => Ok(()),
        Some(ApplyReply::Write(WriteReply::Error(e))) => Err(ClientError::Rejected(e.to_string())),
        _ => Err(ClientError::Rejected(
            "unexpected result of the address record".into(),
        )),
    }
}
