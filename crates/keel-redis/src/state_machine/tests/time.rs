//! Time in the log: stamps in log command format version 2, version-1 entries without them, and
//! the state machine's log time (its monotone maximum, in the digest and in snapshots).

use super::*;

const T0: u64 = 1_700_000_000_000;

#[test]
fn a_version_2_entry_carries_its_stamp_after_the_request_id() {
    let entry = LogCommand::new(7, 3, T0 + 5, set("k", "v")).encode();
    assert_eq!(entry[0], 2, "encoding writes version 2");
    assert_eq!(&entry[1..9], &7u64.to_le_bytes());
    assert_eq!(&entry[9..17], &3u64.to_le_bytes());
    assert_eq!(&entry[17..25], &(T0 + 5).to_le_bytes());
    assert_eq!(entry[25], 1, "op SET at offset 25");
    let decoded = LogCommand::decode(&entry).unwrap();
    assert_eq!(decoded, LogCommand::new(7, 3, T0 + 5, set("k", "v")));
    assert_eq!(decoded.stamp_ms, T0 + 5);
}

#[test]
fn a_version_1_entry_decodes_without_time_and_version_3_is_refused() {
    let v2 = LogCommand::new(7, 3, T0, set("k", "v")).encode();
    // The same entry as version 1: no stamp, op at offset 17.
    let mut v1 = vec![1u8];
    v1.extend_from_slice(&v2[1..17]);
    v1.extend_from_slice(&v2[25..]);
    let decoded = LogCommand::decode(&Bytes::from(v1.clone())).unwrap();
    assert_eq!(decoded, LogCommand::new(7, 3, 0, set("k", "v")));
    // Truncated inside the stamp of a version-2 entry, or the op of a version-1 one: the
    // position of the field that is cut.
    assert_eq!(
        LogCommand::decode(&v2.slice(..20)),
        Err(DecodeError::Truncated(17))
    );
    assert_eq!(
        LogCommand::decode(&Bytes::from(v1[..17].to_vec())),
        Err(DecodeError::Truncated(17))
    );
    let mut v4 = v2.to_vec();
    v4[0] = 4;
    let refused = LogCommand::decode(&Bytes::from(v4));
    assert_eq!(refused, Err(DecodeError::UnsupportedVersion(4)));
    assert_eq!(
        refused.unwrap_err().to_string(),
        "unsupported log command format version 4 (this build reads versions 1 to 3)"
    );
}

#[test]
fn a_version_1_entry_applies_as_before_and_leaves_the_time_alone() {
    let mut sm = KvStateMachine::new();
    sm.apply(1, &LogCommand::new(1, 1, T0, set("a", "1")).encode())
        .unwrap();
    let v2 = LogCommand::new(1, 2, T0 + 10, set("b", "2")).encode();
    let mut v1 = vec![1u8];
    v1.extend_from_slice(&v2[1..17]);
    v1.extend_from_slice(&v2[25..]);
    assert_eq!(
        sm.apply(2, &Bytes::from(v1)),
        Ok(ApplyReply::Write(WriteReply::Ok))
    );
    assert_eq!(sm.get(b"b"), Some(&b"2"[..]));
    assert_eq!(sm.log_time_ms(), T0);
}

#[test]
fn log_time_is_the_highest_stamp_so_far_even_across_a_lower_one() {
    let mut log = Log::new();
    assert_eq!(log.sm.log_time_ms(), 0, "no time before any stamp");
    let empty = log.sm.state_digest();
    assert_eq!(empty, 0, "the empty state without time digests to 0");
    let mut times = Vec::new();
    // A leader at T0 + 3000, then a new leader whose clock is two seconds behind, then one
    // entry without a stamp (version 1), then the new leader's clock passes the old one's.
    for stamp in [T0 + 1000, T0 + 3000, T0 + 1000, 0, T0 + 2999, T0 + 3500] {
        log.stamp_ms = stamp;
        log.apply(set("k", "v"));
        times.push(log.sm.log_time_ms());
    }
    assert_eq!(
        times,
        [
            T0 + 1000,
            T0 + 3000,
            T0 + 3000,
            T0 + 3000,
            T0 + 3000,
            T0 + 3500
        ]
    );
    // Entries that change no pair but carry a later time still move the digest; a lower stamp
    // moves nothing.
    let mut a = Log::new();
    a.stamp_ms = T0;
    a.apply(set("k", "v"));
    let at_t0 = a.sm.state_digest();
    a.stamp_ms = T0 - 1;
    a.apply(set("k", "v"));
    assert_eq!(a.sm.state_digest(), at_t0);
    a.stamp_ms = T0 + 1;
    a.apply(set("k", "v"));
    assert_ne!(a.sm.state_digest(), at_t0);
    // A retry answered from the deduplication table is in the log with its stamp too.
    let seq = a.seq;
    a.stamp_ms = T0 + 50;
    a.apply_as(1, seq, set("k", "other"));
    assert_eq!(a.get("k"), Some(&b"v"[..]), "deduplicated");
    assert_eq!(a.sm.log_time_ms(), T0 + 50);
}

#[test]
fn the_time_is_part_of_the_digest_and_the_state() {
    let mut one = Log::new();
    let mut two = Log::new();
    one.stamp_ms = T0;
    two.stamp_ms = T0 + 1;
    one.apply(set("k", "v"));
    two.apply(set("k", "v"));
    assert_eq!(one.get("k"), two.get("k"));
    assert_ne!(one.sm.state_digest(), two.sm.state_digest());
    assert_ne!(one.sm, two.sm);
    // Unstamped, the digest is the pairs' alone (as before stamps existed).
    let mut plain = Log::new();
    plain.apply(set("k", "v"));
    assert_eq!(plain.sm.state_digest(), digest::pair_hash(b"k", b"v"));
}

#[test]
fn snapshots_carry_the_log_time() {
    let mut log = Log::new();
    log.stamp_ms = T0 + 42;
    log.apply(set("a", "1"));
    log.stamp_ms = T0 + 7;
    log.apply(set("b", "2"));
    let snapshot = log.sm.snapshot();
    assert_eq!(&snapshot[8..12], &6u32.to_le_bytes(), "format version 6");
    // Before the checksum: the tombstones (none: a count), their horizon, versions_valid.
    let time_at = snapshot.len() - 4 - 4 - 8 - 1 - 8;
    assert_eq!(&snapshot[time_at..time_at + 8], &(T0 + 42).to_le_bytes());
    let restored = KvStateMachine::from_snapshot(&snapshot).unwrap();
    assert_eq!(restored.log_time_ms(), T0 + 42);
    assert_eq!(restored.state_digest(), log.sm.state_digest());
    assert_eq!(restored, log.sm);
    assert_eq!(log.sm.snapshot_view().log_time_ms(), T0 + 42);
    assert_eq!(log.sm.snapshot_view().encode(), snapshot);
    // The restored time goes on as the original's would: a lower stamp leaves it.
    let mut after = Log {
        sm: restored,
        index: log.index,
        seq: log.seq,
        stamp_ms: T0 + 1,
    };
    after.apply(set("c", "3"));
    assert_eq!(after.sm.log_time_ms(), T0 + 42);
}

#[test]
fn a_version_2_snapshot_restores_with_no_time() {
    let mut log = Log::new();
    log.stamp_ms = T0;
    log.apply(set("k", "v"));
    log.seq += 1;
    let addrs = MemberAddrs {
        id: 2,
        peer: b("10.0.0.2:7379"),
        client: Bytes::new(),
    };
    log.apply_logged(1, log.seq, LoggedCommand::MemberAddrs(addrs));
    let v3 = snapshot::encode_version(&log.sm, 3);
    let v2 = snapshot::encode_version(&log.sm, 2);
    assert_eq!(
        v2.len(),
        v3.len() - 8,
        "version 2: the same without the log time"
    );
    let old = KvStateMachine::from_snapshot(&v2).expect("version 2 is read");
    assert_eq!(old.log_time_ms(), 0);
    assert_eq!(old.get(b"k"), Some(&b"v"[..]));
    assert_eq!(old.member_addrs(), log.sm.member_addrs());
    assert_eq!(old.applied_index(), log.sm.applied_index());
    assert_eq!(old.state_digest(), digest::pair_hash(b"k", b"v"));
    // A version-3 snapshot cut before its log time is truncated, not read as version 2.
    let mut cut = v3[..v3.len() - 4 - 8].to_vec();
    let crc = crc32c::crc32c(&cut);
    cut.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        KvStateMachine::from_snapshot(&cut),
        Err(SnapshotError::Truncated("the log time"))
    );
}

#[test]
fn an_entry_encoded_early_is_stamped_when_proposed() {
    let mut entry = LogCommand::new(7, 3, 0, set("k", "v")).encode_to_vec();
    LogCommand::restamp(&mut entry, T0 + 9);
    let entry = bytes::Bytes::from(entry);
    assert_eq!(
        LogCommand::decode(&entry).unwrap(),
        LogCommand::new(7, 3, T0 + 9, set("k", "v"))
    );
}
