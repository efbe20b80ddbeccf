//! The session table in a snapshot: written before the inner state machine's snapshot in the
//! same stream, framed so that restore reads exactly the table and hands the rest of the stream,
//! unread, to the inner `restore`. The layout is in the module doc (`sessions/mod.rs`).
//!
//! Every collection is written in ascending order (the table holds `BTreeMap`s only), so replicas
//! with the same state write the same bytes; restore refuses any other order, so a restored
//! table writes back the bytes it was read from.

use std::collections::BTreeMap;
use std::io::Read;

use bytes::{BufMut, Bytes};
use keel_core::codec::Reader;
use keel_engine::RestoreError;

use super::table::{Answer, SessionState, SessionTable};
use super::SessionId;

/// The table format version this build writes and reads.
const TABLE_VERSION: u8 = 1;

/// Outcome bytes of a kept answer.
const ANSWER_RESULT: u8 = 0;
const ANSWER_REFUSED: u8 = 1;

/// Smallest encodings, to check counts against what remains before allocating for them.
const SESSION_BYTES_MIN: usize = 8 + 8 + 8 + 4;
const ANSWER_BYTES_MIN: usize = 8 + 1 + 4;

/// The table's framed bytes: version, body length, body, CRC-32C of the body.
pub(super) fn encode_table(table: &SessionTable) -> Vec<u8> {
    let mut body = Vec::new();
    body.put_u64_le(table.log_time_ms);
    body.put_u32_le(u32::try_from(table.sessions.len()).expect("sessions are bounded"));
    for (&id, session) in &table.sessions {
        body.put_u64_le(id);
        body.put_u64_le(session.last_active_ms);
        body.put_u64_le(session.acknowledged_below);
        body.put_u32_le(u32::try_from(session.answers.len()).expect("answers are bounded"));
        for (&seq, answer) in &session.answers {
            let (outcome, bytes) = match answer {
                Ok(result) => (ANSWER_RESULT, result),
                Err(reason) => (ANSWER_REFUSED, reason),
            };
            body.put_u64_le(seq);
            body.put_u8(outcome);
            body.put_u32_le(u32::try_from(bytes.len()).expect("an answer under 4 GiB"));
            body.put_slice(bytes);
        }
    }
    let mut framed = Vec::with_capacity(1 + 8 + body.len() + 4);
    framed.put_u8(TABLE_VERSION);
    framed.put_u64_le(body.len() as u64);
    framed.put_slice(&body);
    framed.put_u32_le(crc32c::crc32c(&body));
    framed
}

/// Reads the framed table off the front of `data`, leaving the stream at the first byte after
/// it; the table is given `timeout_ms`, the wrapper's own setting.
pub(super) fn read_table(
    data: &mut dyn Read,
    timeout_ms: u64,
) -> Result<SessionTable, RestoreError> {
    let mut head = [0u8; 9];
    data.read_exact(&mut head)?;
    if head[0] != TABLE_VERSION {
        return Err(RestoreError(format!(
            "session table version {} (this build reads {TABLE_VERSION})",
            head[0]
        )));
    }
    let length = u64::from_le_bytes(head[1..].try_into().expect("8 bytes"));
    // Read as it comes rather than allocated from the length: a wrong length costs what the
    // stream holds, no more.
    let mut body = Vec::new();
    Read::take(&mut *data, length).read_to_end(&mut body)?;
    if body.len() as u64 != length {
        return Err(RestoreError(format!(
            "session table: {length} bytes announced, the snapshot ends after {}",
            body.len()
        )));
    }
    let mut crc = [0u8; 4];
    data.read_exact(&mut crc)?;
    if u32::from_le_bytes(crc) != crc32c::crc32c(&body) {
        return Err(RestoreError("session table: checksum mismatch".into()));
    }
    decode_body(Bytes::from(body), timeout_ms)
        .map_err(|why| RestoreError(format!("session table: {why}")))
}

fn decode_body(body: Bytes, timeout_ms: u64) -> Result<SessionTable, String> {
    let mut reader = Reader::new(body);
    let log_time_ms = reader.u64("log time")?;
    let count = reader.count(SESSION_BYTES_MIN, "session count")?;
    let mut sessions = BTreeMap::new();
    let mut previous: Option<SessionId> = None;
    for _ in 0..count {
        let id = reader.u64("session id")?;
        if previous.is_some_and(|p| p >= id) {
            return Err(format!("session {id} out of order"));
        }
        previous = Some(id);
        sessions.insert(id, decode_session(&mut reader, id)?);
    }
    if reader.remaining() != 0 {
        return Err(format!(
            "{} bytes after the last session",
            reader.remaining()
        ));
    }
    Ok(SessionTable::from_sessions(
        timeout_ms,
        log_time_ms,
        sessions,
    ))
}

fn decode_session(reader: &mut Reader, id: SessionId) -> Result<SessionState, String> {
    let last_active_ms = reader.u64("last activity")?;
    let acknowledged_below = reader.u64("acknowledged sequence number")?;
    let count = reader.count(ANSWER_BYTES_MIN, "answer count")?;
    let mut answers = BTreeMap::new();
    let mut previous: Option<u64> = None;
    for _ in 0..count {
        let seq = reader.u64("answer sequence number")?;
        if previous.is_some_and(|p| p >= seq) || seq < acknowledged_below {
            return Err(format!("session {id}: answer {seq} out of order"));
        }
        previous = Some(seq);
        let outcome = reader.u8("answer outcome")?;
        let length = reader.u32("answer length")? as usize;
        let bytes = reader.bytes(length, "answer")?;
        let answer: Answer = match outcome {
            ANSWER_RESULT => Ok(bytes),
            ANSWER_REFUSED => Err(bytes),
            other => return Err(format!("session {id}: answer outcome {other}")),
        };
        answers.insert(seq, answer);
    }
    Ok(SessionState {
        last_active_ms,
        acknowledged_below,
        answers,
    })
}
