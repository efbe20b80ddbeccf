//! AppendEntries on both sides: consistency check, truncation, commit rules, fast backtracking,
//! flow control, retransmission and heartbeats.

use std::collections::BTreeMap;

use super::*;
use crate::CommitStatus;

fn conflicts_from(c: &Cluster, id: NodeId) -> usize {
    c.sent
        .iter()
        .filter(|m| {
            m.from == id
                && matches!(
                    m.body,
                    MessageBody::AppendResponse(AppendResult::Conflict { .. })
                )
        })
        .count()
}

fn appends_to(c: &Cluster, to: NodeId) -> Vec<(LogId, Vec<Entry>)> {
    c.queue
        .iter()
        .filter(|m| m.to == to)
        .filter_map(|m| match &m.body {
            MessageBody::Append { prev, entries, .. } => Some((*prev, entries.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn fig2_append_reject_when_prev_mismatch() {
    let mut f = node_with(2, &[1, 2, 3], &[1, 1, 2], hs(2, None, 0));
    let conflict = |term, rejected, hint_term, hint_index| {
        msg(
            2,
            1,
            term,
            MessageBody::AppendResponse(AppendResult::Conflict {
                rejected,
                hint_term,
                hint_index,
            }),
        )
    };
    // prev beyond the log: the hint is where the log ends.
    f.step(append(1, 2, 2, LogId::new(2, 5), entries_from(6, &[2]), 0));
    assert_eq!(settle(&mut f).messages, [conflict(2, 5, None, 4)]);
    // prev present with another term: the hint is that term and where it starts.
    f.step(append(1, 2, 3, LogId::new(3, 3), entries_from(4, &[3]), 0));
    assert_eq!(settle(&mut f).messages, [conflict(3, 3, Some(2), 3)]);
    assert_eq!(f.log().last_log_id(), LogId::new(2, 3), "log untouched");
}

#[test]
fn fig2_append_truncates_conflicting_suffix_only() {
    let mut f = node_with(2, &[1, 2, 3], &[1, 1, 1, 1, 1], hs(1, None, 2));
    let kept = f.log().entry(3).cloned();
    // 1/3 matches and stays; 2/4 conflicts with 1/4: 1/4 and everything after it go.
    let mut entries = entries_from(3, &[1]);
    entries.extend(entries_from(4, &[2]));
    f.step(append(1, 2, 2, LogId::new(1, 2), entries, 2));
    settle(&mut f);
    let terms: Vec<Term> = (1..=f.log().last_index())
        .map(|i| f.log().term_at(i).unwrap())
        .collect();
    assert_eq!(terms, [1, 1, 1, 2]);
    assert_eq!(f.log().entry(3).cloned(), kept);

    // A delayed Append from the same leader whose entries all match truncates nothing.
    f.step(append(1, 2, 2, LogId::new(1, 2), entries_from(3, &[1]), 2));
    let out = settle(&mut f);
    assert_eq!(f.log().last_log_id(), LogId::new(2, 4), "2/4 survives");
    assert!(out.writes.iter().all(|w| w.entries.is_empty()));
    assert_eq!(out.messages, [ack(2, 1, 2, 3)]);
}

#[test]
fn fig2_append_commit_is_min_of_leader_commit_and_last_new_entry() {
    // Entries 4 and 5 are stale leftovers nobody has vouched for yet.
    let mut f = node_with(2, &[1, 2, 3], &[1, 1, 1, 1, 1], hs(1, None, 0));
    f.step(append(1, 2, 2, LogId::new(1, 2), entries_from(3, &[1]), 10));
    assert_eq!(f.commit_index(), 3, "not 5: only 1..3 were proven to match");
    f.step(append(1, 2, 2, LogId::new(1, 3), vec![], 10));
    assert_eq!(f.commit_index(), 3);
    let applied: Vec<Index> = settle(&mut f).committed.iter().map(|e| e.index).collect();
    assert_eq!(applied, [1, 2, 3]);
    f.step(append(1, 2, 2, LogId::new(1, 3), entries_from(4, &[2]), 10));
    assert_eq!(f.commit_index(), 4);
}

#[test]
fn append_overlapping_commit_skips_the_committed_prefix() {
    let mut f = node_with(2, &[1, 2, 3], &[1, 1, 1, 1], hs(1, Some(1), 3));
    f.step(append(
        1,
        2,
        1,
        LogId::new(1, 1),
        entries_from(2, &[1, 1, 1, 1]),
        3,
    ));
    assert_eq!(settle(&mut f).messages, [ack(2, 1, 1, 5)]);
    assert_eq!(f.log().last_index(), 5);
    // Entirely below the commit index: acknowledged as the commit index.
    f.step(append(1, 2, 1, LogId::new(1, 1), entries_from(2, &[1]), 3));
    assert_eq!(settle(&mut f).messages, [ack(2, 1, 1, 3)]);
    assert_eq!(f.log().last_index(), 5);
}

#[test]
fn fig2_leader_commits_only_current_term_entries() {
    let voters = [1, 2, 3];
    let config = |id| Config {
        entries_per_message_max: 1,
        ..test_config(id)
    };
    let mut c = Cluster::from_storages(vec![
        (config(1), storage_with(&voters, &[1, 2], hs(2, None, 1))),
        (config(2), storage_with(&voters, &[1], hs(2, None, 1))),
        (config(3), storage_with(&voters, &[1], hs(2, None, 1))),
    ]);
    // n1 leads term 3. Its no-op 3/3 is lost on the way (after a first probe, which the
    // followers reject as they lack index 2); 2/2 arrives.
    let mut probed = BTreeMap::new();
    c.set_filter(move |m| match &m.body {
        MessageBody::Append { entries, .. } if entries.iter().any(|e| e.term == 3) => {
            let count = probed.entry(m.to).or_insert(0);
            *count += 1;
            *count == 1
        }
        _ => true,
    });
    assert_eq!(c.elect(1), 3);
    assert_eq!(c.log_terms(2), [1, 2]);
    assert_eq!(c.log_terms(3), [1, 2]);
    assert_eq!(
        c.node(1).commit_index(),
        1,
        "2/2 is on all three, but of term 2"
    );
    assert_eq!(
        c.node(1).commit_status(LogId::new(2, 2)),
        CommitStatus::Pending
    );

    c.clear_filter();
    for _ in 0..ET {
        c.tick_all(1);
    }
    assert_eq!(c.node(1).commit_index(), 3, "3/3 commits, and 2/2 with it");
    assert_eq!(
        c.node(1).commit_status(LogId::new(2, 2)),
        CommitStatus::Committed
    );
}

#[test]
fn fast_backtracking_uses_conflict_term_hint() {
    let voters = [1, 2, 3];
    let leader_log = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6];
    // Raft paper Figure 7 (f) (leader lacks the follower's terms), and a follower with extra
    // entries of a term the leader has.
    for (follower_log, conflicts_max) in [
        (&[1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3][..], 2),
        (&[1, 1, 1, 4, 4, 4, 4][..], 2),
    ] {
        let mut c = Cluster::from_storages(vec![
            (
                test_config(1),
                storage_with(&voters, &leader_log, hs(6, None, 3)),
            ),
            (
                test_config(2),
                storage_with(&voters, follower_log, hs(6, None, 3)),
            ),
            (
                test_config(3),
                storage_with(&voters, &leader_log, hs(6, None, 3)),
            ),
        ]);
        c.elect(1);
        let conflicts = conflicts_from(&c, 2);
        assert!(
            conflicts <= conflicts_max,
            "{conflicts} rejections for {follower_log:?}, one per term at most"
        );
        assert_eq!(c.log_terms(2), c.log_terms(1));
        assert_eq!(c.node(2).commit_index(), 11);
    }
}

#[test]
fn flow_control_bounds_entries_and_inflight() {
    let mut c = Cluster::with_config(3, |config| {
        config.entries_per_message_max = 2;
        config.inflight_messages_max = 3;
    });
    c.elect(1);
    for i in 0..20 {
        c.propose(1, &format!("e{i}"));
    }
    c.process(1);
    let window = appends_to(&c, 2);
    let prevs: Vec<Index> = window.iter().map(|(p, _)| p.index).collect();
    assert_eq!(prevs, [1, 3, 5], "three in flight, two entries each");
    assert!(window.iter().all(|(_, e)| e.len() == 2));

    // One acknowledgement frees one slot.
    let first = c.queue.iter().position(|m| m.to == 2).expect("append");
    let m = c.queue.remove(first).expect("append");
    c.node_mut(2).step(m);
    c.process(2);
    c.process(2);
    let reply = c.queue.iter().position(|m| m.from == 2).expect("ack");
    let reply = c.queue.remove(reply).expect("ack");
    c.node_mut(1).step(reply);
    c.process(1);
    let prevs: Vec<Index> = appends_to(&c, 2).iter().map(|(p, _)| p.index).collect();
    assert_eq!(prevs, [3, 5, 7]);

    c.run_until_quiet();
    assert_eq!(c.node(2).log().last_index(), 21);
    assert!(c.sent.iter().all(|m| match &m.body {
        MessageBody::Append { entries, .. } => entries.len() <= 2,
        _ => true,
    }));
}

/// `hold_partial_appends`: while an Append to a follower is in flight, only Appends the message
/// limits cut short leave; the log's tail waits for the window to empty and then leaves in one
/// message. Switched off, every batch leaves at once.
#[test]
fn flow_control_holds_the_tail_while_an_append_is_in_flight() {
    for hold in [true, false] {
        let mut c = Cluster::with_config(3, |config| {
            config.entries_per_message_max = 2;
            config.inflight_messages_max = 8;
            config.hold_partial_appends = hold;
        });
        c.elect(1);
        let prevs =
            |c: &Cluster| -> Vec<Index> { appends_to(c, 2).iter().map(|(p, _)| p.index).collect() };
        c.propose(1, "a"); // index 2
        c.process(1);
        assert_eq!(
            prevs(&c),
            [1],
            "the first batch leaves at once (hold {hold})"
        );
        c.propose(1, "b"); // 3
        c.process(1);
        let expected: &[Index] = if hold { &[1] } else { &[1, 2] };
        assert_eq!(prevs(&c), expected, "a one-entry tail (hold {hold})");
        for data in ["c", "d", "e", "f"] {
            c.propose(1, data); // 4..=7
        }
        c.process(1);
        // Held: 3..=7 is more than one message of two, so [3, 4] and [5, 6] leave, 7 waits.
        let expected: &[Index] = if hold { &[1, 2, 4] } else { &[1, 2, 3, 5] };
        assert_eq!(prevs(&c), expected, "hold {hold}");

        // The window empties only when every Append in flight is answered.
        for _ in 0..expected.len() {
            let i = c.queue.iter().position(|m| m.to == 2).expect("append");
            let m = c.queue.remove(i).expect("append");
            c.node_mut(2).step(m);
            c.process(2);
            c.process(2);
        }
        while let Some(i) = c.queue.iter().position(|m| m.from == 2) {
            let ack = c.queue.remove(i).expect("ack");
            c.node_mut(1).step(ack);
            c.process(1);
        }
        let tail: Vec<Index> = appends_to(&c, 2)
            .iter()
            .flat_map(|(_, e)| e.iter().map(|e| e.index))
            .collect();
        let expected: &[Index] = if hold { &[7] } else { &[] };
        assert_eq!(
            tail, expected,
            "the held tail leaves once answered (hold {hold})"
        );
        c.run_until_quiet();
        assert_eq!(c.node(2).log().last_index(), 7);
        assert_eq!(c.node(1).commit_index(), 7);
    }
}

#[test]
fn flow_control_bounds_bytes_per_message() {
    let mut c = Cluster::with_config(3, |config| config.bytes_per_message_max = 100);
    c.elect(1);
    for _ in 0..4 {
        c.propose(1, &"x".repeat(60)); // 84 bytes counted each
    }
    c.propose(1, &"y".repeat(500)); // over the bound alone: still sent, alone
    c.process(1);
    let sizes: Vec<usize> = appends_to(&c, 2).iter().map(|(_, e)| e.len()).collect();
    // The fifth is the log's tail: it waits for the window to empty (`hold_partial_appends`).
    assert_eq!(sizes, [1, 1, 1, 1]);
    c.run_until_quiet();
    assert_eq!(c.node(2).log().last_index(), 6);
    assert_eq!(c.node(1).commit_index(), 6);
    assert!(c.sent.iter().all(|m| match &m.body {
        MessageBody::Append { entries, .. } => entries.len() <= 1,
        _ => true,
    }));
}

#[test]
fn lost_appends_are_retransmitted_after_stall() {
    let mut c = Cluster::new(3);
    c.elect(1);
    c.block(1, 2);
    let x = c.propose_and_commit(1, "x");
    c.heal();
    assert_eq!(c.node(2).log().last_index(), x.index - 1);
    c.tick_all(ET / 2 + 2);
    assert_eq!(c.node(2).log().last_log_id(), x);
    assert_eq!(c.node(2).commit_index(), x.index);
}

#[test]
fn heartbeat_commit_is_clamped_to_the_follower_log() {
    // The leader believes this follower holds 8 entries; it holds 3 (S29).
    let mut f = node_with(3, &[1, 2, 3], &[1, 1, 1], hs(1, Some(1), 1));
    f.step(msg(
        1,
        3,
        1,
        MessageBody::Heartbeat {
            commit: 8,
            read_round: 0,
            clock: Default::default(),
        },
    ));
    assert!(f.commit_index() <= 3, "never beyond the last entry");
    let out = settle(&mut f);
    assert!(out.committed.iter().all(|e| e.index <= 3));
    assert!(out
        .messages
        .iter()
        .any(|m| m.to == 1 && matches!(m.body, MessageBody::HeartbeatResponse { .. })));
}

#[test]
fn leader_resets_progress_when_follower_reports_lost_entries() {
    let mut n = node_with(1, &[1, 2, 3], &[1; 8], hs(1, None, 8));
    make_leader(&mut n);
    n.step(ack(2, 1, 2, 9));
    n.step(ack(3, 1, 2, 9));
    settle(&mut n);
    assert_eq!(n.commit_index(), 9);
    let z = n.propose(data("z")).expect("leader");
    settle(&mut n);
    n.step(ack(2, 1, 2, z.index));
    // n3 lost its disk: the Append of z goes unanswered, the leader probes at match + 1 ...
    let mut probes = Vec::new();
    for _ in 0..ET {
        n.tick();
        probes.extend(
            settle(&mut n)
                .messages
                .into_iter()
                .filter(|m| m.to == 3 && is_append(m)),
        );
    }
    let MessageBody::Append { prev, .. } = probes[0].body else {
        unreachable!()
    };
    assert_eq!(prev, LogId::new(2, 9));
    // ... and n3 answers that it holds nothing beyond 3.
    let conflict = AppendResult::Conflict {
        rejected: 9,
        hint_term: None,
        hint_index: 4,
    };
    n.step(msg(3, 1, 2, MessageBody::AppendResponse(conflict)));
    let prevs: Vec<LogId> = settle(&mut n)
        .messages
        .iter()
        .filter_map(|m| match &m.body {
            MessageBody::Append { prev, .. } if m.to == 3 => Some(*prev),
            _ => None,
        })
        .collect();
    assert_eq!(prevs, [LogId::new(1, 3)], "probe from what n3 still has");
    assert_eq!(n.commit_index(), z.index, "commit never moves back");
}

#[test]
fn propose_backpressure_bounds_uncommitted_entries() {
    let config = Config {
        uncommitted_entries_max: 3,
        ..test_config(1)
    };
    let mut n = node_with_config(config, &[1, 2, 3], &[1], hs(1, None, 1));
    make_leader(&mut n); // the no-op is the first uncommitted entry
    n.propose(data("a")).expect("2 uncommitted");
    n.propose(data("b")).expect("3 uncommitted");
    assert_eq!(n.propose(data("c")), Err(crate::ProposeError::Backpressure));
    settle(&mut n);
    n.step(ack(2, 1, 2, 4));
    settle(&mut n);
    n.propose(data("c")).expect("room again");
}

#[test]
fn apply_batches_are_bounded_by_max_apply_entries() {
    let config = Config {
        apply_entries_max: 3,
        ..test_config(1)
    };
    let mut n = node_with_config(config, &[1], &[], hs(0, None, 0));
    make_leader(&mut n);
    for i in 0..10 {
        n.propose(data(&format!("{i}"))).expect("leader");
    }
    let mut batches = Vec::new();
    while n.has_ready() {
        let rd = n.ready();
        if let Some(w) = rd.write {
            n.persisted(w.id);
        }
        if let Some(last) = rd.committed.last() {
            batches.push(rd.committed.len());
            n.applied(last.index);
        }
    }
    assert_eq!(batches, [3, 3, 3, 1]);
}
