//! The pieces of the session layer one by one: the envelope's bytes, the refusal codes, the
//! table's expiry order, the table's snapshot frame, a fatal inner error. The behaviour as an
//! embedder sees it is in `tests/sessions.rs`.

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use keel_core::LogId;
use keel_engine::{ApplyError, RestoreError, SnapshotWriter, StateMachine};

use super::envelope::{Envelope, Refusal, ENVELOPE_HEADER_LEN};
use super::snapshot::{encode_table, read_table};
use super::table::SessionTable;
use super::Deduplicated;

#[test]
fn an_envelope_is_laid_out_as_documented() {
    let envelope = Envelope::request(0x0102, 7, 5, 1_700_000_000_000, Bytes::from_static(b"xy"));
    let bytes = envelope.encode();
    assert_eq!(bytes.len(), ENVELOPE_HEADER_LEN + 2);
    assert_eq!(bytes[0], 1, "version");
    assert_eq!(bytes[1], 2, "kind: request");
    assert_eq!(bytes[2..10], 0x0102u64.to_le_bytes(), "session");
    assert_eq!(bytes[10..18], 7u64.to_le_bytes(), "seq");
    assert_eq!(bytes[18..26], 1_700_000_000_000u64.to_le_bytes(), "time");
    assert_eq!(bytes[26..34], 5u64.to_le_bytes(), "lowest unanswered");
    assert_eq!(&bytes[34..], b"xy");
    assert_eq!(Envelope::decode(&bytes), Ok(envelope));

    for envelope in [Envelope::register(3), Envelope::close(9, 4)] {
        assert_eq!(Envelope::decode(&envelope.encode()), Ok(envelope));
    }
    assert_eq!(Envelope::register(3).encode()[1], 1);
    assert_eq!(Envelope::close(9, 4).encode()[1], 3);
}

#[test]
fn anything_but_a_version_1_envelope_is_an_error() {
    let valid = Envelope::request(1, 2, 2, 3, Bytes::from_static(b"data")).encode();
    for length in 0..ENVELOPE_HEADER_LEN {
        assert!(
            Envelope::decode(&valid.slice(..length)).is_err(),
            "{length} bytes"
        );
    }
    let with = |offset: usize, byte: u8| {
        let mut bytes = valid.to_vec();
        bytes[offset] = byte;
        Envelope::decode(&Bytes::from(bytes))
    };
    assert!(with(0, 2).unwrap_err().contains("version 2"));
    assert!(with(0, 0).is_err());
    assert!(with(1, 0).unwrap_err().contains("kind 0"));
    assert!(with(1, 4).is_err());
    // A request cannot have been answered at or past its own number.
    assert!(with(26, 3).unwrap_err().contains("above"));
    // Fields a kind does not use must be zero.
    let mut register = Envelope::register(1);
    register.seq = 1;
    assert!(Envelope::decode(&register.encode()).is_err());
    let mut close = Envelope::close(1, 1);
    close.data = Bytes::from_static(b"x");
    assert!(Envelope::decode(&close.encode()).is_err());
}

#[test]
fn refusals_round_trip_through_their_code_byte() {
    let refusals = [
        Refusal::Inner(Bytes::from_static(b"no")),
        Refusal::Malformed("short".into()),
        Refusal::SessionExpired,
        Refusal::TooManySessions,
        Refusal::TooManyUnacknowledged,
        Refusal::AlreadyAnswered,
    ];
    for (code, refusal) in refusals.into_iter().enumerate() {
        let bytes = refusal.encode();
        assert_eq!(usize::from(bytes[0]), code);
        assert_eq!(Refusal::decode(&bytes), Some(refusal));
    }
    assert_eq!(
        &Refusal::Inner(Bytes::from_static(b"no")).encode()[1..],
        b"no"
    );
    assert_eq!(Refusal::decode(&Bytes::new()), None);
    assert_eq!(Refusal::decode(&Bytes::from_static(b"\x06?")), None);
}

#[test]
fn expiry_takes_the_idlest_sessions_and_only_them() {
    let mut table = SessionTable::new(Duration::from_millis(100));
    for (id, at) in [(10, 1_000), (11, 1_050), (12, 1_020)] {
        table.register(id, at).unwrap();
    }
    // Session 10 registered at log time 1,000; 12 at 1,050 as well (the log time never went
    // back to 1,020).
    assert_eq!(table.log_time_ms, 1_050);
    table.advance(1_100);
    assert_eq!(
        table.len(),
        3,
        "idle for exactly the timeout is not past it"
    );
    table.advance(1_101);
    assert_eq!(table.sessions.keys().copied().collect::<Vec<_>>(), [11, 12]);
    assert_eq!(table.by_activity.len(), 2);
    table.advance(1_151);
    assert_eq!(table.len(), 0);
    assert!(table.by_activity.is_empty());
}

fn table_with_answers() -> SessionTable {
    let mut table = SessionTable::new(Duration::from_secs(60));
    table.register(4, 1_000).unwrap();
    table.register(9, 1_001).unwrap();
    for seq in 1..=3 {
        let request = Envelope::request(4, seq, 1, 1_002, Bytes::new());
        let answer = if seq == 2 {
            Err(Bytes::from_static(b"refused"))
        } else {
            Ok(Bytes::from(vec![seq as u8; 3]))
        };
        table.record(&request, 1_002, Some(answer));
    }
    table
}

#[test]
fn the_table_frame_reads_back_to_the_same_bytes_and_leaves_the_rest_of_the_stream() {
    let table = table_with_answers();
    let framed = encode_table(&table);
    let mut stream = framed.clone();
    stream.extend_from_slice(b"inner snapshot");
    let mut reader = &stream[..];
    let restored = read_table(&mut reader, table.timeout_ms).expect("restored");
    assert_eq!(
        reader, b"inner snapshot",
        "the inner snapshot is left unread"
    );
    assert_eq!(restored.sessions, table.sessions);
    assert_eq!(restored.by_activity, table.by_activity);
    assert_eq!(restored.log_time_ms, 1_002);
    assert_eq!(encode_table(&restored), framed);
}

#[test]
fn a_damaged_table_frame_is_refused() {
    let framed = encode_table(&table_with_answers());
    let read = |bytes: &[u8]| {
        read_table(&mut &bytes[..], 60_000)
            .map(|_| ())
            .unwrap_err()
            .0
    };

    for length in [0, 5, 9, framed.len() - 10, framed.len() - 1] {
        assert!(!read(&framed[..length]).is_empty(), "{length} bytes");
    }
    let mut version = framed.clone();
    version[0] = 2;
    assert!(read(&version).contains("version 2"));
    let mut flipped = framed.clone();
    flipped[20] ^= 1;
    assert!(read(&flipped).contains("checksum"));

    // A body in the wrong order, with a right checksum, is refused too: restored tables must
    // write back the bytes they were read from.
    let mut body = Vec::new();
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(&2u32.to_le_bytes());
    for id in [7u64, 3] {
        body.extend_from_slice(&id.to_le_bytes());
        body.extend_from_slice(&[0; 8 + 8 + 4]);
    }
    let mut frame = vec![1];
    frame.extend_from_slice(&(body.len() as u64).to_le_bytes());
    frame.extend_from_slice(&body);
    frame.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    assert!(read(&frame).contains("out of order"));
}

/// Applies anything but `fatal`, on which it fails as if its own storage had.
#[derive(Default)]
struct FailsOnFatal(u64);

impl StateMachine for FailsOnFatal {
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
        if &data[..] == b"fatal" {
            return Err(ApplyError::Fatal("disk gone".into()));
        }
        self.0 += 1;
        Ok(Bytes::new())
    }
    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(self.0.to_le_bytes().to_vec())
    }
    fn restore(&mut self, _last: LogId, data: &mut dyn Read) -> Result<(), RestoreError> {
        let mut count = [0; 8];
        data.read_exact(&mut count)?;
        self.0 = u64::from_le_bytes(count);
        Ok(())
    }
}

#[test]
fn a_fatal_inner_error_leaves_the_table_as_it_was() {
    let mut machine = Deduplicated::new(FailsOnFatal::default());
    machine
        .apply(LogId::new(1, 1), &Envelope::register(1_000).encode())
        .unwrap();
    let fatal = Envelope::request(1, 1, 1, 5_000, Bytes::from_static(b"fatal")).encode();
    assert!(matches!(
        machine.apply(LogId::new(1, 2), &fatal),
        Err(ApplyError::Fatal(_))
    ));
    assert_eq!(machine.log_time_ms(), 1_000, "the log time did not move");
    assert_eq!(machine.unacknowledged_results(1), Some(0), "nothing kept");
    // The entry is applied again after the restart: it is new then, and applies.
    let retry = Envelope::request(1, 1, 1, 5_000, Bytes::from_static(b"ok")).encode();
    assert_eq!(machine.apply(LogId::new(1, 2), &retry), Ok(Bytes::new()));
    assert_eq!(machine.inner().0, 1);
}

/// A session lives in a task of its own: it and its requests' futures are `Send`.
#[test]
fn a_session_and_its_requests_can_move_between_threads() {
    fn send<T: Send>(_: &T) {}
    let check = |session: &mut super::Session<FailsOnFatal>| {
        send(&session.propose(Bytes::new()));
        send(session);
    };
    let _ = check;
}
