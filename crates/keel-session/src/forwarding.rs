//! When a follower retries a forwarded write, under which request id, and when it gives up: the
//! decisions of forwarding, without I/O and without a clock.
//!
//! A follower that is asked for a write proposes it under its connection's request id
//! `(client id, seq)`; refused as not the leader, it forwards the write to the leader under that
//! same id (`RAFT.FORWARD`, see `command/raft_forward.rs`), and the leader proposes it under that
//! id. A lost link, a reply that does not come in time, or an answer that the request was not
//! applied (the node it reached no longer leads, it was busy) is retried under the same id at the
//! node that leads by then, until an answer comes or the deadline passes. A write retried after
//! its first copy applied is not applied again: the state machine answers a request id it applied
//! with the reply it remembered (`state_machine/dedup.rs`).
//!
//! The limit of that guarantee is the deduplication window: a session is evicted once
//! `DedupLimits::clients_max` (4,096) other clients wrote after it, and a retry of an evicted
//! session applies again. Within the 15 s a forwarded write is retried, that takes more than
//! 4,096 distinct clients writing through the cluster meanwhile.
//!
//! [`ForwardedWrite`] is driven by the tokio shell in keel-server's `leader_link.rs` and, the same
//! code, by the deterministic simulator: time comes in as milliseconds on any clock that only
//! moves forward, and every call answers with the [`Next`] thing to do.

use bytes::Bytes;

use keel_redis::state_machine::ApplyReply;
use keel_redis::RequestId;
use keel_resp::Reply;

/// `-TRYAGAIN` naming the leader, for a client that may go there itself.
pub fn leader_elsewhere(leader: u64, addr: &str) -> Reply {
    Reply::error(format!("TRYAGAIN leader is node {leader} at {addr}"))
}

/// `-TRYAGAIN` naming a leader whose client address this node does not know (its peer address is
/// of no use to a client).
pub fn leader_address_unknown(leader: u64) -> Reply {
    Reply::error(format!(
        "TRYAGAIN leader is node {leader}; its client address is unknown"
    ))
}

/// The reply to a write whose entry applied with `applied` (an encoded [`ApplyReply`]).
pub fn write_reply(applied: &Bytes) -> Reply {
    ApplyReply::decode(applied).map_or_else(
        || Reply::error("ERR internal error: undecodable write result"),
        ApplyReply::into_reply,
    )
}

pub static MULTI: [Bytes; 1] = [Bytes::from_static(b"MULTI")];
pub static EXEC: [Bytes; 1] = [Bytes::from_static(b"EXEC")];

/// A write to forward under its request id, as the client sent it.
#[derive(Clone, Copy, Debug)]
pub enum Forwarded<'a> {
    /// One write's arguments.
    Write(&'a [Bytes]),
    /// A transaction: its queued requests.
    Exec(&'a [Vec<Bytes>]),
}

/// One request that carries a forwarded write to the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WirePart<'a> {
    /// `RAFT.FORWARD <client-id> <seq>` (see `command/raft_forward.rs`): the id of the request
    /// after it.
    Announce(RequestId),
    /// A request as the client sent it (or `MULTI` / `EXEC` around a transaction's).
    Request(&'a [Bytes]),
}

/// The requests that carry `request` to the leader under `id`, in order, the announcement second
/// to last: the write after it, or `MULTI`, the queued requests, the announcement, `EXEC`. The
/// client's requests go as they are. The leader answers each with one reply, in this order.
pub fn wire_parts(id: RequestId, request: Forwarded<'_>) -> impl Iterator<Item = WirePart<'_>> {
    let (opening, queued, last): (Option<&[Bytes]>, &[Vec<Bytes>], &[Bytes]) = match request {
        Forwarded::Write(args) => (None, &[], args),
        Forwarded::Exec(queued) => (Some(&MULTI[..]), queued, &EXEC[..]),
    };
    opening
        .into_iter()
        .chain(queued.iter().map(Vec::as_slice))
        .map(WirePart::Request)
        .chain([WirePart::Announce(id), WirePart::Request(last)])
}

/// Most refused writes of one client connection a follower forwards to the leader together, in
/// one exchange (each under its own id, in request order), so that a pipelining client is not
/// served one round trip per write. Half the deduplication window
/// (`DedupLimits::replies_per_client_max`): the writes of a connection in flight at once are
/// those of one group, so a retry of one of them finds at most this many later seqs applied
/// before it, and never falls below the window (which would refuse it as too old).
pub const FORWARD_GROUP_MAX: usize = 64;
const _: () = assert!(FORWARD_GROUP_MAX >= 1);

/// How a forwarded write is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// How long after its first attempt a write may still be sent again.
    pub deadline_ms: u64,
    /// How long the first attempt waits for its reply; each attempt after waits twice as long
    /// as the one before (never past the deadline).
    pub reply_wait_first_ms: u64,
    /// The pause after the first failed attempt, doubled after each one up to
    /// `backoff_max_ms`.
    pub backoff_first_ms: u64,
    pub backoff_max_ms: u64,
    /// Most attempts, the first included.
    pub attempts_max: u32,
    /// A deliberately broken variant for the simulator to catch.
    #[cfg(feature = "mutations")]
    pub mutation: Option<keel_redis::Mutation>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            // The forwarding reply timeout (keel-server's `leader_link.rs`): longer than the
            // runtime's request timeout (10 s), after which a leader answers
            // `-TRYAGAIN outcome unknown` by itself.
            deadline_ms: 15_000,
            // A healthy leader answers in milliseconds; a leader stopped or cut off does not
            // answer at all, and two election timeouts (100 to 200 ms each by default) elect
            // another.
            reply_wait_first_ms: 2_000,
            backoff_first_ms: 50,
            backoff_max_ms: 1_000,
            attempts_max: 16,
            #[cfg(feature = "mutations")]
            mutation: None,
        }
    }
}

/// What the shell does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Send the write under `id` to the node that leads now, and report what came of it by
    /// `reply_by_ms` at the latest (no reply by then is [`ForwardedWrite::on_lost_link`]).
    Send { id: RequestId, reply_by_ms: u64 },
    /// Send nothing before `until_ms`, then call [`ForwardedWrite::on_wake`].
    Wait { until_ms: u64 },
    /// The reply just reported is the answer: relay it to the client.
    Relay,
    /// No more attempts: answer the client with this outcome.
    GiveUp(Abandoned),
}

/// What a write that was given up on may have done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abandoned {
    /// Some attempt may have been applied: `-TRYAGAIN outcome unknown`.
    Unknown,
    /// No attempt was applied (nothing was sent, or every node that got it refused it): the
    /// shell answers with the last refusal it saw.
    NotApplied,
}

/// What a reply says about the attempt that got it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The write's own answer, to relay (its result, or an error about the request itself).
    Final,
    /// Refused before it was proposed, or proposed by a node that then found it was not the
    /// leader (the runtime's `NotLeader`: definitely not applied), or refused by a bound.
    NotApplied,
    /// Proposed, with no result: it may still apply.
    MaybeApplied,
}

/// The answers the leader gives a forwarding connection that mean "not applied, try the leader
/// of now": keel-redis's `client_error_reply` and the not-leader answers of keel-server, checked
/// there by a test.
const NOT_APPLIED_PREFIXES: [&str; 3] = [
    "TRYAGAIN no leader",
    "TRYAGAIN leader is node ",
    "TRYAGAIN busy: ",
];
/// ... and "proposed, outcome unknown".
const MAYBE_APPLIED: [&str; 2] = [
    "TRYAGAIN outcome unknown",
    "TRYAGAIN the node is shutting down",
];

impl Answer {
    /// Anything else, other `-TRYAGAIN`s included (a request id below the dedup window), is
    /// the write's answer: retrying it would not change it.
    pub fn of(reply: &Reply) -> Answer {
        let Reply::Error(error) = reply else {
            return Answer::Final;
        };
        if NOT_APPLIED_PREFIXES.iter().any(|p| error.starts_with(p)) {
            Answer::NotApplied
        } else if MAYBE_APPLIED.contains(&error.as_ref()) {
            Answer::MaybeApplied
        } else {
            Answer::Final
        }
    }
}

/// One forwarded write (or transaction), from its first attempt to its answer.
#[derive(Clone, Debug)]
pub struct ForwardedWrite {
    id: RequestId,
    deadline_ms: u64,
    policy: RetryPolicy,
    /// Attempts started (sent, or tried to send).
    attempts: u32,
    /// Some attempt got as far as the leader's log, or may have: only then can giving up leave
    /// the outcome unknown.
    may_have_applied: bool,
    /// The node that got the write ignores request ids (a build without `RAFT.FORWARD`): it
    /// proposed the write under an id of its own, so sending it again could apply it twice.
    id_refused: bool,
}

impl ForwardedWrite {
    /// A write proposed under `id` and refused as not the leader, to be forwarded from `now_ms`
    /// on: its first attempt.
    pub fn start(id: RequestId, now_ms: u64, policy: RetryPolicy) -> (ForwardedWrite, Next) {
        let mut write = ForwardedWrite {
            id,
            deadline_ms: now_ms.saturating_add(policy.deadline_ms),
            policy,
            attempts: 0,
            may_have_applied: false,
            id_refused: false,
        };
        let first = write.send(now_ms);
        (write, first)
    }

    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The pause of [`Next::Wait`] is over.
    pub fn on_wake(&mut self, now_ms: u64) -> Next {
        self.send(now_ms)
    }

    /// The attempt failed before anything was sent: no leader known, its address unknown or
    /// unreachable, the link refused.
    pub fn on_not_sent(&mut self, now_ms: u64) -> Next {
        self.after_failure(now_ms)
    }

    /// The attempt was sent and its reply did not come: the link was lost, or `reply_by_ms`
    /// passed.
    pub fn on_lost_link(&mut self, now_ms: u64) -> Next {
        self.may_have_applied = true;
        if self.id_refused {
            return Next::GiveUp(Abandoned::Unknown);
        }
        self.after_failure(now_ms)
    }

    /// The node the attempt was sent to answered `RAFT.FORWARD` with an error: it does not
    /// know the command, and runs the write under an id of its own. Whatever comes of this
    /// attempt is its outcome: no retry.
    pub fn on_id_refused(&mut self) {
        self.id_refused = true;
    }

    /// The attempt's reply came.
    pub fn on_reply(&mut self, now_ms: u64, reply: &Reply) -> Next {
        if self.id_refused {
            return Next::Relay;
        }
        match Answer::of(reply) {
            Answer::Final => Next::Relay,
            Answer::NotApplied => self.after_failure(now_ms),
            Answer::MaybeApplied => {
                self.may_have_applied = true;
                self.after_failure(now_ms)
            }
        }
    }

    fn send(&mut self, now_ms: u64) -> Next {
        if self.attempts >= self.policy.attempts_max || now_ms >= self.deadline_ms {
            return self.give_up();
        }
        self.attempts += 1;
        let wait = doubled(self.policy.reply_wait_first_ms, self.attempts, u64::MAX);
        Next::Send {
            id: self.attempt_id(),
            reply_by_ms: now_ms.saturating_add(wait).min(self.deadline_ms),
        }
    }

    fn after_failure(&mut self, now_ms: u64) -> Next {
        if self.attempts >= self.policy.attempts_max {
            return self.give_up();
        }
        let pause = doubled(
            self.policy.backoff_first_ms,
            self.attempts,
            self.policy.backoff_max_ms,
        );
        let until_ms = now_ms.saturating_add(pause);
        if until_ms >= self.deadline_ms {
            return self.give_up();
        }
        Next::Wait { until_ms }
    }

    fn give_up(&self) -> Next {
        Next::GiveUp(if self.may_have_applied {
            Abandoned::Unknown
        } else {
            Abandoned::NotApplied
        })
    }

    /// The id of the attempt just started: the write's own, which is what makes a retry
    /// harmless (the `forward-retry-new-id` mutation breaks exactly that).
    fn attempt_id(&self) -> RequestId {
        #[cfg(feature = "mutations")]
        if self.policy.mutation == Some(keel_redis::Mutation::ForwardRetryNewId)
            && self.attempts > 1
        {
            // A fresh dedup session per retry: the state machine cannot tell it is a retry.
            return RequestId {
                client_id: splitmix64(self.id.client_id ^ u64::from(self.attempts)),
                seq: self.id.seq,
            };
        }
        self.id
    }
}

/// `first` doubled for every `nth` after the first, at most `max`.
fn doubled(first: u64, nth: u32, max: u64) -> u64 {
    let factor = 1u64.checked_shl(nth.saturating_sub(1)).unwrap_or(0);
    if factor == 0 {
        return max;
    }
    first.saturating_mul(factor).min(max)
}

/// A well-mixed 64-bit value from another (SplitMix64's finalizer), so that ids made up by the
/// mutation do not fall on ids the simulator's clients use.
#[cfg(feature = "mutations")]
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: RequestId = RequestId {
        client_id: 0x5eed,
        seq: 7,
    };

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    /// A group's retried write may find every later write of its group applied: they must all
    /// fit in the deduplication window with room to spare.
    #[test]
    fn a_forwarded_group_fits_in_half_the_dedup_window() {
        let window = keel_redis::state_machine::DedupLimits::default().replies_per_client_max;
        assert!(2 * FORWARD_GROUP_MAX as u64 <= u64::from(window));
    }

    /// A write forwarded at time 0 with the default policy.
    fn start() -> (ForwardedWrite, Next) {
        ForwardedWrite::start(ID, 0, policy())
    }

    /// ... with no deadline: only the attempt bound ends it.
    fn start_unbounded() -> (ForwardedWrite, Next) {
        let policy = RetryPolicy {
            deadline_ms: u64::MAX,
            ..policy()
        };
        ForwardedWrite::start(ID, 0, policy)
    }

    fn sent_id(next: Next) -> RequestId {
        match next {
            Next::Send { id, .. } => id,
            other => panic!("expected a send, got {other:?}"),
        }
    }

    fn wake_time(next: Next) -> u64 {
        match next {
            Next::Wait { until_ms } => until_ms,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    #[test]
    fn every_retry_is_sent_under_the_writes_own_id() {
        let (mut write, first) = start();
        assert_eq!(sent_id(first), ID);
        let mut now = 0;
        for failure in 0..6 {
            now += 100;
            let next = match failure % 3 {
                0 => write.on_lost_link(now),
                1 => write.on_reply(now, &Reply::error("TRYAGAIN no leader")),
                _ => write.on_not_sent(now),
            };
            now = wake_time(next);
            assert_eq!(sent_id(write.on_wake(now)), ID);
        }
        assert_eq!(write.attempts(), 7);
    }

    #[test]
    fn a_final_reply_is_relayed_whatever_came_before() {
        let (mut write, _) = start();
        let wake = wake_time(write.on_lost_link(10));
        write.on_wake(wake);
        assert_eq!(write.on_reply(wake + 5, &Reply::Integer(3)), Next::Relay);
        let (mut write, _) = start();
        // An error about the request itself is its answer too.
        let error = Reply::error("ERR value is not an integer or out of range");
        assert_eq!(write.on_reply(1, &error), Next::Relay);
    }

    #[test]
    fn after_a_send_the_deadline_gives_up_with_the_outcome_unknown() {
        let (mut write, first) = start();
        let Next::Send { reply_by_ms, .. } = first else {
            panic!("no first send")
        };
        let mut now = reply_by_ms;
        let mut next = write.on_lost_link(now);
        // Every later attempt definitely not applied: the lost one still may have been.
        while let Next::Wait { until_ms } = next {
            now = until_ms;
            assert!(matches!(write.on_wake(now), Next::Send { .. }));
            now += 10;
            next = write.on_reply(now, &Reply::error("TRYAGAIN leader is node 2 at h:1"));
        }
        assert_eq!(next, Next::GiveUp(Abandoned::Unknown));
        assert!(now <= policy().deadline_ms);
    }

    #[test]
    fn an_answer_of_outcome_unknown_counts_as_maybe_applied() {
        let (mut write, _) = start();
        let mut next = write.on_reply(5, &Reply::error("TRYAGAIN outcome unknown"));
        while let Next::Wait { until_ms } = next {
            write.on_wake(until_ms);
            next = write.on_not_sent(until_ms + 1);
        }
        assert_eq!(next, Next::GiveUp(Abandoned::Unknown));
    }

    #[test]
    fn with_nothing_sent_the_deadline_gives_up_with_not_applied() {
        let (mut write, _) = start();
        let mut now = 0;
        let mut next = write.on_not_sent(now);
        while let Next::Wait { until_ms } = next {
            now = until_ms;
            write.on_wake(now);
            // Each attempt takes a while to fail (a connect timing out), so the deadline, not
            // the attempt bound, ends this.
            now += 1_500;
            next = write.on_not_sent(now);
        }
        assert_eq!(next, Next::GiveUp(Abandoned::NotApplied));
        assert!(write.attempts() < policy().attempts_max);
        // Refused by every node it reached: not applied either.
        let (mut write, _) = start();
        let mut next = write.on_reply(1, &Reply::error("TRYAGAIN busy: pending proposals"));
        while let Next::Wait { until_ms } = next {
            write.on_wake(until_ms);
            next = write.on_reply(until_ms + 1, &Reply::error("TRYAGAIN no leader"));
        }
        assert_eq!(next, Next::GiveUp(Abandoned::NotApplied));
    }

    #[test]
    fn no_attempt_starts_at_or_after_the_deadline_and_replies_are_awaited_only_until_it() {
        let no_time = RetryPolicy {
            deadline_ms: 0,
            ..policy()
        };
        let (_, first) = ForwardedWrite::start(ID, 5_000, no_time);
        assert_eq!(first, Next::GiveUp(Abandoned::NotApplied));
        let short = RetryPolicy {
            deadline_ms: 100,
            ..policy()
        };
        let (mut write, first) = ForwardedWrite::start(ID, 900, short);
        assert_eq!(
            first,
            Next::Send {
                id: ID,
                reply_by_ms: 1_000
            }
        );
        // A pause that would end past the deadline is not taken.
        assert_eq!(write.on_lost_link(990), Next::GiveUp(Abandoned::Unknown));
        // Nor is an attempt started at the deadline.
        let (mut write, _) = ForwardedWrite::start(ID, 900, short);
        let wake = wake_time(write.on_not_sent(920));
        assert_eq!(
            write.on_wake(wake.max(1_000)),
            Next::GiveUp(Abandoned::NotApplied)
        );
    }

    /// The pause after each of a run of failed attempts, and the wait for each attempt's reply,
    /// until the attempt bound ends the run.
    fn pauses_and_waits(
        mut fail: impl FnMut(&mut ForwardedWrite, u64) -> Next,
    ) -> (Vec<u64>, Vec<u64>) {
        let (mut write, mut next) = start_unbounded();
        let (mut pauses, mut waits) = (Vec::new(), Vec::new());
        let mut now = 0;
        while let Next::Send { reply_by_ms, .. } = next {
            waits.push(reply_by_ms - now);
            next = fail(&mut write, now);
            if let Next::Wait { until_ms } = next {
                pauses.push(until_ms - now);
                now = until_ms;
                next = write.on_wake(now);
            }
        }
        (pauses, waits)
    }

    #[test]
    fn the_pause_between_attempts_doubles_from_50_ms_to_at_most_1_s() {
        let (pauses, _) = pauses_and_waits(|write, now| write.on_not_sent(now));
        assert_eq!(
            pauses[..7],
            [50, 100, 200, 400, 800, 1_000, 1_000],
            "{pauses:?}"
        );
        assert!(pauses.iter().all(|&p| p <= policy().backoff_max_ms));
        assert_eq!(doubled(50, 200, 1_000), 1_000, "no shift overflows");
    }

    #[test]
    fn the_reply_wait_doubles_from_the_first() {
        let (_, waits) = pauses_and_waits(|write, now| write.on_lost_link(now));
        assert_eq!(waits[..4], [2_000, 4_000, 8_000, 16_000]);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(
            doubled(2_000, 200, u64::MAX),
            u64::MAX,
            "saturated, not wrapped"
        );
    }

    #[test]
    fn attempts_are_bounded_even_when_each_fails_at_once() {
        let (mut write, mut next) = start_unbounded();
        let mut sends = 0;
        let mut now = 0;
        loop {
            match next {
                Next::Send { .. } => {
                    sends += 1;
                    next = write.on_reply(now, &Reply::error("TRYAGAIN no leader"));
                }
                Next::Wait { until_ms } => {
                    now = until_ms;
                    next = write.on_wake(now);
                }
                Next::GiveUp(outcome) => {
                    assert_eq!(outcome, Abandoned::NotApplied);
                    break;
                }
                Next::Relay => panic!("nothing to relay"),
            }
        }
        assert_eq!(sends, policy().attempts_max);
        // With the default policy the bound ends a run of quick refusals before the deadline.
        assert!(now < policy().deadline_ms, "{now}");
    }

    #[test]
    fn a_node_that_ignores_the_id_is_never_sent_the_write_again() {
        let (mut write, _) = start();
        write.on_id_refused();
        assert_eq!(write.on_lost_link(10), Next::GiveUp(Abandoned::Unknown));
        let (mut write, _) = start();
        write.on_id_refused();
        let tryagain = Reply::error("TRYAGAIN no leader");
        assert_eq!(write.on_reply(10, &tryagain), Next::Relay);
    }

    #[test]
    fn replies_are_told_apart() {
        for (reply, answer) in [
            (Reply::OK, Answer::Final),
            (Reply::Null, Answer::Final),
            (Reply::error("ERR syntax error"), Answer::Final),
            (Reply::error("OOM command not allowed"), Answer::Final),
            (
                Reply::error("TRYAGAIN request id is older than the deduplication window"),
                Answer::Final,
            ),
            (Reply::error("TRYAGAIN no leader"), Answer::NotApplied),
            (
                Reply::error("TRYAGAIN leader is node 3; its client address is unknown"),
                Answer::NotApplied,
            ),
            (
                Reply::error("TRYAGAIN busy: uncommitted"),
                Answer::NotApplied,
            ),
            (
                Reply::error("TRYAGAIN outcome unknown"),
                Answer::MaybeApplied,
            ),
            (
                Reply::error("TRYAGAIN the node is shutting down"),
                Answer::MaybeApplied,
            ),
        ] {
            assert_eq!(Answer::of(&reply), answer, "{reply:?}");
        }
    }

    #[cfg(feature = "mutations")]
    #[test]
    fn the_forward_retry_new_id_mutation_sends_each_retry_under_a_new_id() {
        let policy = RetryPolicy {
            mutation: Some(keel_redis::Mutation::ForwardRetryNewId),
            ..RetryPolicy::default()
        };
        let (mut write, first) = ForwardedWrite::start(ID, 0, policy);
        assert_eq!(sent_id(first), ID, "the first attempt is unchanged");
        let mut ids = vec![ID];
        let mut now = 0;
        for _ in 0..3 {
            now = wake_time(write.on_lost_link(now + 10));
            let id = sent_id(write.on_wake(now));
            assert!(!ids.contains(&id), "{id:?} reused");
            ids.push(id);
        }
    }
}
