//! Starting inputs for every target, made by the real encoders and writers: valid frames,
//! requests and WAL directories get the fuzzer past checksums and magic numbers from its first
//! execution. `cargo run -p keel-fuzz --example seeds -- DIR` writes them; the checked-in
//! corpora (`corpus/<target>`) are these plus what the fuzzer found, minimized.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use keel_core::{
    AppendResult, Entry, EntryPayload, HardState, LogId, Membership, Message, MessageBody,
    RepairAnswer, SnapshotMeta, Write,
};
use keel_transport::wire::{
    self, auth, AckStatus, Channel, ChunkHeader, ClusterSecret, Handshake, PositionStatus,
    SnapshotAck, SnapshotId, SnapshotOffer, SnapshotPosition, FRAME_HEADER_SIZE_BYTES,
    SNAPSHOT_CHANNEL_VERSION,
};
use keel_wal::{Fs, SimFs, Wal};

use crate::wal_recovery;

/// The seeds of `target` (empty for an unknown name).
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "raft_step" => raft_step(),
        "resp_decode" => resp_decode(),
        "peer_frame" => peer_frame(),
        "handshake" => handshake(),
        "snapshot_chunk" => snapshot_chunk(),
        "wal_recovery" => wal_recovery(),
        _ => Vec::new(),
    }
}

/// A small deterministic generator (SplitMix64) for seed bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Every role and option set, each followed by random actions.
fn raft_step() -> Vec<Vec<u8>> {
    let mut rng = Rng(17);
    let mut out = Vec::new();
    for setup in [0x00u8, 0x01, 0x02, 0x03, 0x0e, 0x16, 0x32, 0x3e, 0x52, 0x7a] {
        let mut input = vec![setup];
        input.extend(rng.bytes(200));
        out.push(input);
    }
    out
}

fn resp_decode() -> Vec<Vec<u8>> {
    let mut requests: Vec<Vec<u8>> = Vec::new();
    let mut set = BytesMut::new();
    keel_resp::encode_request(&["SET", "key", "value"], &mut set);
    requests.push(set.to_vec());
    let mut pipelined = BytesMut::new();
    keel_resp::encode_request(&["GET", "key"], &mut pipelined);
    keel_resp::encode_request(&["INCR", "counter"], &mut pipelined);
    keel_resp::encode_request::<&[u8]>(&[], &mut pipelined);
    requests.push(pipelined.to_vec());
    requests.push(b"PING\r\n".to_vec());
    requests.push(b"SET \"a key\" 'it''s' \"\\x41\\n\"\r\nGET k\n".to_vec());
    requests.push(b"*-1\r\n*0\r\n*1\r\n$-1\r\n".to_vec());
    requests.push(b"*2\r\n$4\r\nECHO\r\n$20\r\n0123456789".to_vec());
    let mut out = Vec::new();
    for (i, r) in requests.into_iter().enumerate() {
        for mode in [0u8, 1, 2, 7] {
            let mut input = vec![mode.wrapping_add(i as u8 * 2)];
            input.extend_from_slice(&r);
            out.push(input);
        }
    }
    out
}

#[expect(clippy::too_many_lines)]
fn sample_messages() -> Vec<Message> {
    let membership = Arc::new(Membership {
        voters: BTreeSet::from([1, 2, 3]),
        outgoing: BTreeSet::from([1, 2]),
        learners: BTreeSet::from([4]),
    });
    let entries = vec![
        Entry {
            term: 2,
            index: 5,
            payload: EntryPayload::Noop,
        },
        Entry {
            term: 2,
            index: 6,
            payload: EntryPayload::Normal(Bytes::from_static(b"data")),
        },
        Entry {
            term: 3,
            index: 7,
            payload: EntryPayload::Membership(membership.clone()),
        },
    ];
    let bodies = vec![
        MessageBody::PreVote {
            last_log_id: LogId::new(2, 4),
        },
        MessageBody::PreVoteResponse { granted: true },
        MessageBody::RequestVote {
            last_log_id: LogId::new(2, 4),
            transfer: true,
        },
        MessageBody::VoteResponse { granted: false },
        MessageBody::Append {
            prev: LogId::new(1, 4),
            entries: entries.clone(),
            commit: 4,
        },
        MessageBody::AppendResponse(AppendResult::Success { match_index: 7 }),
        MessageBody::AppendResponse(AppendResult::Conflict {
            rejected: 4,
            hint_term: Some(1),
            hint_index: 2,
        }),
        MessageBody::Heartbeat {
            commit: 7,
            read_round: 3,
            clock: Default::default(),
        },
        MessageBody::HeartbeatResponse {
            read_round: 3,
            lagging: true,
            clock: Default::default(),
        },
        MessageBody::TimeoutNow,
        MessageBody::InstallSnapshot {
            meta: SnapshotMeta {
                last: LogId::new(3, 9),
                membership: membership.clone(),
                term_history: vec![LogId::new(1, 1), LogId::new(3, 5)],
            },
        },
        MessageBody::RepairRequest {
            promised: LogId::new(3, 9),
            last: LogId::new(2, 6),
            terms: vec![LogId::new(2, 7), LogId::new(3, 8)],
            holds_last: false,
        },
        MessageBody::RepairResponse(RepairAnswer::Entries {
            prev: LogId::new(1, 4),
            entries: entries.clone(),
        }),
        MessageBody::RepairResponse(RepairAnswer::Lacks {
            after: LogId::new(2, 6),
        }),
        MessageBody::RepairResponse(RepairAnswer::Unknown),
        MessageBody::RepairResponse(RepairAnswer::Committed {
            through: LogId::new(2, 6),
            config: (*membership).clone(),
        }),
        MessageBody::RepairResponse(RepairAnswer::Holds {
            after: LogId::new(2, 6),
            through: LogId::new(3, 8),
            config: (*membership).clone(),
        }),
    ];
    bodies
        .into_iter()
        .map(|body| Message {
            from: 2,
            to: 1,
            term: 3,
            body,
        })
        .collect()
}

fn hello() -> Handshake {
    Handshake::new(7, 2, Channel::Messages)
        .with_advertised_addr("127.0.0.1:7001".parse().expect("address"))
        .with_incarnation(0xfeed)
        .with_client_addr("localhost:6379")
}

fn peer_frame() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for m in sample_messages() {
        let mut f = Vec::new();
        wire::encode_message(0, &m, &mut f);
        frames.push(f);
    }
    let mut f = Vec::new();
    wire::encode_handshake(&hello(), &mut f);
    wire::encode_refusal("wrong cluster id", &mut f);
    frames.push(f);
    let mut f = Vec::new();
    wire::encode_handshake(&hello().with_nonce(&[9; 32]), &mut f);
    wire::encode_challenge(
        &wire::Challenge {
            responder: 1,
            nonce: [1; 32],
            proof: [2; 32],
        },
        &mut f,
    );
    wire::encode_response(&wire::Response { proof: [3; 32] }, &mut f);
    frames.push(f);
    let mut out = Vec::new();
    for (i, f) in frames.into_iter().enumerate() {
        let mut input = vec![(i % 2) as u8];
        input.extend_from_slice(&f);
        out.push(input);
    }
    // A batch of messages in one input, as a busy connection carries them.
    let mut batch = vec![1];
    for m in sample_messages().into_iter().take(5) {
        wire::encode_message(0, &m, &mut batch);
    }
    out.push(batch);
    // Messages in parts, with a whole message between two parts, as a sender interleaves them.
    let mut parted = vec![1];
    for m in sample_messages().into_iter().take(3) {
        let mut whole = Vec::new();
        wire::encode_message(0, &m, &mut whole);
        let body = &whole[wire::FRAME_HEADER_SIZE_BYTES..];
        let cut = body.len() / 2;
        message_part(body.len(), 0, &body[..cut], &mut parted);
        wire::encode_message(0, &sample_messages()[0], &mut parted);
        message_part(body.len(), cut, &body[cut..], &mut parted);
    }
    out.push(parted);
    out
}

/// One frame of body kind 11 (a part of a message body of `message_len` bytes).
fn message_part(message_len: usize, offset: usize, data: &[u8], out: &mut Vec<u8>) {
    let mut body = vec![wire::BODY_MESSAGE_PART];
    body.extend_from_slice(&(message_len as u32).to_le_bytes());
    body.extend_from_slice(&(offset as u32).to_le_bytes());
    body.extend_from_slice(data);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
}

/// `[kind, len, bytes]` records of the `handshake` target.
fn record(kind: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.push(kind);
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn handshake() -> Vec<Vec<u8>> {
    let secret = ClusterSecret::new(&[0x11; auth::SECRET_BYTES_MIN]).expect("secret");
    let initiator = auth::Initiator::new(secret, hello(), [5; 32], 1);
    let body = |f: Vec<u8>| f[FRAME_HEADER_SIZE_BYTES..].to_vec();
    let mut plain = Vec::new();
    wire::encode_handshake(&hello(), &mut plain);
    let challenge = wire::Challenge {
        responder: 1,
        nonce: [1; 32],
        proof: [2; 32],
    };
    let mut c = Vec::new();
    wire::encode_challenge(&challenge, &mut c);
    let mut r = Vec::new();
    wire::encode_response(&wire::Response { proof: [3; 32] }, &mut r);
    let mut sealed = Vec::new();
    sealed.extend_from_slice(&8u32.to_le_bytes());
    sealed.extend_from_slice(&[0xab; auth::TAG_BYTES]);
    sealed.extend_from_slice(b"payload!");

    let mut out = Vec::new();
    let mut a = Vec::new();
    record(0, initiator.hello_body(), &mut a);
    record(2, &body(r.clone()), &mut a);
    record(3, &sealed, &mut a);
    out.push(a);
    let mut b = Vec::new();
    record(0, &body(plain), &mut b);
    record(1, &body(c), &mut b);
    out.push(b);
    let mut snapshot_hello = Vec::new();
    wire::encode_handshake(
        &Handshake::new(7, 3, Channel::Snapshot).with_nonce(&[6; 32]),
        &mut snapshot_hello,
    );
    let mut d = Vec::new();
    record(0, &body(snapshot_hello), &mut d);
    record(2, &body(r), &mut d);
    out.push(d);
    out
}

/// A real snapshot file (as `keel_wal` writes it) streamed in chunks after an offer.
fn snapshot_chunk() -> Vec<Vec<u8>> {
    let fs = SimFs::new();
    let dir = std::path::Path::new("/snap");
    fs.create_dir_all(dir).expect("mkdir");
    let meta = SnapshotMeta {
        last: LogId::new(3, 9),
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: vec![LogId::new(1, 1), LogId::new(3, 5)],
    };
    let path = keel_wal::snapshot::save_snapshot(&fs, dir, &meta, b"state machine bytes", 1)
        .expect("save snapshot");
    let file = fs.read_file(&path).expect("snapshot file");
    let mut out = Vec::new();
    let id = SnapshotId {
        leader_term: 4,
        index: 9,
        term: 3,
    };
    let offer = SnapshotOffer {
        version: SNAPSHOT_CHANNEL_VERSION,
        group: 0,
        id,
        total_len_bytes: file.len() as u64,
    };
    for pieces in [1usize, 2, 3] {
        let mut input = Vec::new();
        wire::encode_offer(&offer, &mut input);
        let step = file.len().div_ceil(pieces);
        let mut offset = 0;
        while offset < file.len() {
            let end = (offset + step).min(file.len());
            let chunk = &file[offset..end];
            let last = (end == file.len()).then(|| (file.len() as u64, crc32c::crc32c(&file)));
            wire::encode_chunk_header(
                &ChunkHeader {
                    id,
                    offset: offset as u64,
                    len_bytes: chunk.len() as u32,
                    crc: crc32c::crc32c(chunk),
                    last,
                },
                &mut input,
            );
            input.extend_from_slice(chunk);
            offset = end;
        }
        out.push(input);
    }
    // The receiver's answers, which share the channel's frame format.
    let mut answers = Vec::new();
    wire::encode_position(
        &SnapshotPosition {
            index: 9,
            term: 3,
            status: PositionStatus::Continue,
            offset: 0,
        },
        &mut answers,
    );
    wire::encode_ack(
        &SnapshotAck {
            index: 9,
            term: 3,
            status: AckStatus::Accepted,
            received: 10,
            durable: 8,
        },
        &mut answers,
    );
    out.push(answers);
    out
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        term,
        index,
        payload: EntryPayload::Normal(Bytes::from(format!("{term}/{index}"))),
    }
}

fn write(id: u64, entries: Vec<Entry>, hs: Option<HardState>, sync: bool) -> Write {
    Write {
        id,
        install: None,
        entries,
        hard_state: hs,
        purge_to: None,
        sync,
        release_promise: false,
        lower_promise_to: None,
    }
}

/// WAL directories the writer made: a short log, a log over several segments with a
/// truncation and commit-only frames, and one compacted behind a snapshot.
fn wal_recovery() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let hs = |term, commit| HardState {
        term,
        vote: Some(1),
        commit,
    };

    // Empty WAL, as a new node leaves it.
    let fs = SimFs::new();
    drop(Wal::open(fs.clone(), wal_recovery::DIR, wal_recovery::config()).expect("open"));
    out.push(wal_recovery::image(&fs, false));

    // A few entries, a commit-only frame.
    let fs = SimFs::new();
    let (mut wal, _) =
        Wal::open(fs.clone(), wal_recovery::DIR, wal_recovery::config()).expect("open");
    wal.write_batch(&[write(
        1,
        (1..=3).map(|i| entry(1, i)).collect(),
        Some(hs(1, 0)),
        true,
    )])
    .expect("write");
    wal.write_batch(&[write(2, Vec::new(), Some(hs(1, 2)), false)])
        .expect("commit");
    drop(wal);
    out.push(wal_recovery::image(&fs, false));
    out.push(wal_recovery::image(&fs, true));

    // Several segments, a truncation by a new leader's entries, then more commits.
    let fs = SimFs::new();
    let (mut wal, _) =
        Wal::open(fs.clone(), wal_recovery::DIR, wal_recovery::config()).expect("open");
    let big = |term: u64, index: u64| Entry {
        term,
        index,
        payload: EntryPayload::Normal(Bytes::from(vec![index as u8; 900])),
    };
    for i in 1..=12 {
        wal.write_batch(&[write(i, vec![big(1, i)], Some(hs(1, i - 1)), true)])
            .expect("write");
    }
    wal.write_batch(&[write(13, vec![entry(2, 11)], Some(hs(2, 10)), true)])
        .expect("truncate");
    wal.write_batch(&[write(14, Vec::new(), Some(hs(2, 11)), false)])
        .expect("commit");
    drop(wal);
    out.push(wal_recovery::image(&fs, false));

    // Compacted behind a snapshot at 6.
    let fs = SimFs::new();
    let (mut wal, _) =
        Wal::open(fs.clone(), wal_recovery::DIR, wal_recovery::config()).expect("open");
    for i in 1..=10 {
        wal.write_batch(&[write(i, vec![big(1, i)], Some(hs(1, i)), true)])
            .expect("write");
    }
    let meta = SnapshotMeta {
        last: LogId::new(1, 6),
        membership: Arc::new(Membership::new_voters([1, 2, 3])),
        term_history: vec![LogId::new(1, 1)],
    };
    wal.save_snapshot(&meta, b"kv state").expect("snapshot");
    let mut purge = write(11, Vec::new(), None, true);
    purge.purge_to = Some(6);
    wal.write_batch(&[purge]).expect("purge");
    drop(wal);
    out.push(wal_recovery::image(&fs, false));
    out.push(wal_recovery::image(&fs, true));
    out
}
