//! Arbitrary messages (anything the wire format can carry) stepped into a follower, a candidate
//! and a leader, between ticks, proposals and drained `Ready`s: no input may panic the core,
//! whether or not the validator stands in front of it.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::membership::Membership;
use crate::types::SnapshotMeta;

/// Small values where the protocol's decisions are, and the edges where arithmetic breaks.
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0..8u64,
        1 => Just(u64::MAX),
        1 => Just(u64::MAX - 1),
        1 => Just(crate::TERM_LIMIT),
        1 => Just(crate::TERM_LIMIT - 1),
        1 => any::<u64>(),
    ]
}

fn node_id() -> impl Strategy<Value = NodeId> {
    prop_oneof![8 => 1..=4u64, 1 => Just(0u64), 1 => Just(u64::MAX)]
}

fn log_id() -> impl Strategy<Value = LogId> {
    (number(), number()).prop_map(|(term, index)| LogId::new(term, index))
}

fn membership() -> impl Strategy<Value = Membership> {
    let set = || proptest::collection::btree_set(0..=4u64, 0..=3);
    (set(), set(), set()).prop_map(|(voters, outgoing, learners)| Membership {
        voters,
        outgoing,
        learners,
    })
}

fn payload() -> impl Strategy<Value = EntryPayload> {
    prop_oneof![
        Just(EntryPayload::Noop),
        Just(EntryPayload::Normal(Bytes::from_static(b"x"))),
        membership().prop_map(|m| EntryPayload::Membership(Arc::new(m))),
    ]
}

/// Entries either shaped like a real Append (contiguous after a base, rising terms) or anything.
fn entries() -> impl Strategy<Value = Vec<Entry>> {
    let plausible = (
        0..6u64,
        1..4u64,
        proptest::collection::vec((0..2u64, payload()), 0..4),
    )
        .prop_map(|(base, term, steps)| {
            let mut term = term;
            steps
                .into_iter()
                .enumerate()
                .map(|(i, (bump, payload))| {
                    term += bump;
                    Entry {
                        term,
                        index: base + 1 + i as u64,
                        payload,
                    }
                })
                .collect()
        });
    let any_shape = proptest::collection::vec(
        (number(), number(), payload()).prop_map(|(term, index, payload)| Entry {
            term,
            index,
            payload,
        }),
        0..4,
    );
    prop_oneof![plausible, any_shape]
}

fn body() -> impl Strategy<Value = MessageBody> {
    prop_oneof![
        log_id().prop_map(|last_log_id| MessageBody::PreVote { last_log_id }),
        any::<bool>().prop_map(|granted| MessageBody::PreVoteResponse { granted }),
        (log_id(), any::<bool>()).prop_map(|(last_log_id, transfer)| MessageBody::RequestVote {
            last_log_id,
            transfer
        }),
        any::<bool>().prop_map(|granted| MessageBody::VoteResponse { granted }),
        (log_id(), entries(), number()).prop_map(|(prev, entries, commit)| MessageBody::Append {
            prev,
            entries,
            commit
        }),
        number().prop_map(
            |match_index| MessageBody::AppendResponse(AppendResult::Success { match_index })
        ),
        (number(), proptest::option::of(number()), number()).prop_map(
            |(rejected, hint_term, hint_index)| MessageBody::AppendResponse(
                AppendResult::Conflict {
                    rejected,
                    hint_term,
                    hint_index
                }
            )
        ),
        (number(), number()).prop_map(|(commit, read_round)| MessageBody::Heartbeat {
            commit,
            read_round,
            clock: Default::default()
        }),
        (number(), any::<bool>()).prop_map(|(read_round, lagging)| {
            MessageBody::HeartbeatResponse {
                read_round,
                lagging,
                clock: Default::default(),
            }
        }),
        Just(MessageBody::TimeoutNow),
        (
            log_id(),
            membership(),
            proptest::collection::vec(log_id(), 0..3)
        )
            .prop_map(
                |(last, membership, term_history)| MessageBody::InstallSnapshot {
                    meta: SnapshotMeta {
                        last,
                        membership: Arc::new(membership),
                        term_history,
                    }
                }
            ),
    ]
}

#[derive(Clone, Debug)]
enum Input {
    Step(Message),
    Tick,
    Propose,
    Settle,
}

fn input() -> impl Strategy<Value = Input> {
    let message = (
        node_id(),
        prop_oneof![4 => Just(1u64), 1 => node_id()],
        number(),
        body(),
    )
        .prop_map(|(from, to, term, body)| Message {
            from,
            to,
            term,
            body,
        });
    prop_oneof![
        6 => message.prop_map(Input::Step),
        2 => Just(Input::Tick),
        1 => Just(Input::Propose),
        2 => Just(Input::Settle),
    ]
}

/// n1 of n1..n3 with entries of terms 1, 1, 2, in the given role.
fn node_in(role: Role) -> RaftNode {
    let mut n = node_with(1, &[1, 2, 3], &[1, 1, 2], hs(2, None, 1));
    match role {
        Role::Leader => {
            make_leader(&mut n);
        }
        Role::Candidate => make_candidate(&mut n),
        _ => {
            settle(&mut n);
        }
    }
    n
}

fn run(role: Role, validated: bool, inputs: Vec<Input>) {
    let mut n = node_in(role);
    for input in inputs {
        match input {
            Input::Step(m) => {
                if !validated || n.validate(&m).is_ok() {
                    n.step(m);
                }
            }
            Input::Tick => n.tick(),
            Input::Propose => {
                let _ = n.propose(data("p"));
            }
            Input::Settle => {
                settle(&mut n);
            }
        }
    }
    settle(&mut n);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_message_panics_a_follower(validated: bool, inputs in proptest::collection::vec(input(), 1..40)) {
        run(Role::Follower, validated, inputs);
    }

    #[test]
    fn no_message_panics_a_candidate(validated: bool, inputs in proptest::collection::vec(input(), 1..40)) {
        run(Role::Candidate, validated, inputs);
    }

    #[test]
    fn no_message_panics_a_leader(validated: bool, inputs in proptest::collection::vec(input(), 1..40)) {
        run(Role::Leader, validated, inputs);
    }
}
