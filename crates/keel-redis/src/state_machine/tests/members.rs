//! Member addresses recorded through the log (`RAFT.MEMBER ADD ... CLIENT`): the same on every
//! replica, kept in snapshots, bounded, outside the key-value digest.

use super::*;

fn record(id: u64, peer: &str, client: &str) -> LoggedCommand {
    LoggedCommand::MemberAddrs(MemberAddrs {
        id,
        peer: b(peer),
        client: b(client),
    })
}

impl Log {
    fn record(&mut self, id: u64, peer: &str, client: &str) -> ApplyReply {
        self.seq += 1;
        self.apply_logged(1, self.seq, record(id, peer, client))
    }
}

fn addrs_of(sm: &KvStateMachine) -> Vec<(u64, String, String)> {
    sm.member_addrs()
        .iter()
        .map(|(id, a)| {
            assert_eq!(*id, a.id);
            let text = |b: &Bytes| String::from_utf8(b.to_vec()).unwrap();
            (*id, text(&a.peer), text(&a.client))
        })
        .collect()
}

#[test]
fn records_replace_and_forget_and_leave_the_digest_alone() {
    let mut log = Log::new();
    log.apply(set("k", "v"));
    let digest = log.sm.state_digest();
    let version = log.sm.member_addrs_version();
    let ok = ApplyReply::Write(WriteReply::Ok);
    assert_eq!(log.record(4, "10.0.0.4:7379", "10.0.0.4:6379"), ok);
    assert_eq!(log.record(5, "10.0.0.5:7379", ""), ok);
    assert_ne!(log.sm.member_addrs_version(), version);
    assert_eq!(
        addrs_of(&log.sm),
        [
            (4, "10.0.0.4:7379".into(), "10.0.0.4:6379".into()),
            (5, "10.0.0.5:7379".into(), String::new())
        ]
    );
    // A later record replaces; both addresses empty forgets.
    assert_eq!(log.record(4, "node4:7379", "node4:6379"), ok);
    assert_eq!(log.record(5, "", ""), ok);
    assert_eq!(
        addrs_of(&log.sm),
        [(4, "node4:7379".into(), "node4:6379".into())]
    );
    assert_eq!(
        log.sm.state_digest(),
        digest,
        "addresses are not key-value state"
    );
    assert_eq!(log.sm.len(), 1);

    // A retried record (same request id) is not applied again.
    let retry = LogCommand::new(1, log.seq, 0, record(4, "other:1", "other:2")).encode();
    log.index += 1;
    assert_eq!(log.sm.apply(log.index, &retry).unwrap(), ok);
    assert_eq!(addrs_of(&log.sm)[0].1, "node4:7379");
}

#[test]
fn the_number_of_members_recorded_is_bounded() {
    let mut log = Log::new();
    for id in 1..=MEMBER_ADDRS_MAX as u64 {
        assert_eq!(log.record(id, "h:1", ""), ApplyReply::Write(WriteReply::Ok));
    }
    let full = ApplyReply::Write(WriteReply::Error(WriteError::TooManyMembers));
    assert_eq!(log.record(MEMBER_ADDRS_MAX as u64 + 1, "h:1", ""), full);
    // A member already recorded may still change, and forgetting one makes room.
    assert_eq!(log.record(7, "h:2", ""), ApplyReply::Write(WriteReply::Ok));
    assert_eq!(log.record(8, "", ""), ApplyReply::Write(WriteReply::Ok));
    assert_eq!(
        log.record(MEMBER_ADDRS_MAX as u64 + 1, "h:1", ""),
        ApplyReply::Write(WriteReply::Ok)
    );
    assert_eq!(log.sm.member_addrs().len(), MEMBER_ADDRS_MAX);
}

#[test]
fn snapshots_carry_member_addresses_and_version_1_snapshots_still_restore() {
    let mut log = Log::new();
    log.apply(set("k", "v"));
    log.record(2, "10.0.0.2:7379", "");
    log.record(9, "10.0.0.9:7379", "10.0.0.9:6379");
    let snapshot = log.sm.snapshot();
    let restored = KvStateMachine::from_snapshot(&snapshot).unwrap();
    assert_eq!(addrs_of(&restored), addrs_of(&log.sm));
    assert_eq!(restored, log.sm);
    assert_eq!(log.sm.snapshot_view().encode(), snapshot);
    let mut replica = KvStateMachine::new();
    let version = replica.member_addrs_version();
    replica.restore(&snapshot).unwrap();
    assert_ne!(
        replica.member_addrs_version(),
        version,
        "a restore is a change readers must see"
    );

    // The same state without members, written in format version 1 (no members section).
    let mut plain = Log::new();
    plain.apply(set("k", "v"));
    let v1 = snapshot::encode_version(&plain.sm, 1);
    let old = KvStateMachine::from_snapshot(&v1).expect("version 1 is read");
    assert_eq!(old.get(b"k"), Some(&b"v"[..]));
    assert_eq!(old.state_digest(), plain.sm.state_digest());
    assert_eq!(old.applied_index(), plain.sm.applied_index());
    assert!(old.member_addrs().is_empty());

    // A members section that breaks its rules is refused.
    let mut descending = Log::new();
    descending.record(3, "a:1", "");
    let mut bytes = snapshot::encode_version(&descending.sm, 3);
    let count_at = bytes.len() - 4 - 8 - (8 + 4 + 3 + 4) - 4;
    bytes[count_at..count_at + 4].copy_from_slice(&(MEMBER_ADDRS_MAX as u32 + 1).to_le_bytes());
    let crc_at = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..crc_at]);
    bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        KvStateMachine::from_snapshot(&bytes),
        Err(SnapshotError::Malformed(_))
    ));
}

#[test]
fn member_address_entries_decode_strictly() {
    let entry = LogCommand::new(3, 4, 0, record(4, "node4:7379", "node4:6379")).encode();
    assert_eq!(
        LogCommand::decode(&entry).unwrap().command,
        record(4, "node4:7379", "node4:6379")
    );
    let node_zero = LogCommand::new(3, 4, 0, record(0, "a:1", "")).encode();
    assert!(matches!(
        LogCommand::decode(&node_zero),
        Err(DecodeError::InvalidMemberAddrs(_))
    ));
    let long = "h".repeat(log_command::MEMBER_ADDR_BYTES_MAX + 1);
    let too_long = LogCommand::new(3, 4, 0, record(4, &long, "")).encode();
    assert!(matches!(
        LogCommand::decode(&too_long),
        Err(DecodeError::InvalidMemberAddrs(_))
    ));
    // Inside an EXEC the op is unknown: a transaction never changes membership metadata.
    let mut exec = LogCommand::new(3, 4, 0, LoggedCommand::Exec(vec![QueuedCommand::Ping]))
        .encode()
        .to_vec();
    let op_at = exec.len() - 1;
    exec[op_at] = 8;
    exec.extend_from_slice(&4u64.to_le_bytes());
    exec.extend_from_slice(&0u32.to_le_bytes());
    exec.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        LogCommand::decode(&Bytes::from(exec)),
        Err(DecodeError::UnknownOp(8))
    );
}
