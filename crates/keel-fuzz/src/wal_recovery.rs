//! `wal_recovery`: a WAL directory made of the input's bytes, in an in-memory `SimFs`, opened
//! with `Wal::open`. Opening must return the recovered state or a clean error; once it returned
//! the state, a second recovery of the repaired directory must find the same state, the log must
//! take one more entry, and a reopen must find that entry at the end.
//!
//! Input: a mode byte, then files `[tag, len: u16, content_len: u16, content]`: the file is
//! `content` cut or padded with zeros to `len` bytes (a segment is mostly zeros; its image
//! holds only what precedes them). The tag names the file:
//!
//! | tag % 8 | file |
//! |---|---|
//! | 0..=3 | segment `tag + 1` |
//! | 4 | snapshot file; two more bytes give its index and term |
//! | 5 | a segment left in preparation (`.wal.tmp`) |
//! | 6 | a snapshot left half written (`.snap.tmp`) |
//! | 7 | the promise record if `len` is odd, else a file recovery does not read |
//!
//! With bit 0 of the mode byte set, segment headers and frame checksums (and the promise
//! record's slot checksums) are recomputed before the files are written, so mutations of what
//! frames *say* get past the checksums and reach the item decoder and the recovery rules.
//!
//! Before opening, `keel_wal::inspect` reads the directory as `keel check` does: it must return
//! a report (damaged or not), never panic.

use std::path::Path;

use keel_core::storage::Storage;
use keel_core::{Entry, EntryPayload, HardState, LogId, Write};
use keel_wal::segment::{
    self, encode_segment_header, frame_size_bytes, read_frame_header, FRAME_HEADER_SIZE_BYTES,
    FRAME_TRAILER_SIZE_BYTES, SEGMENT_HEADER_SIZE_BYTES,
};
use keel_wal::snapshot::snapshot_file_name;
use keel_wal::{FileHandle, Fs, SimFs, Wal, WalConfig};

use crate::Input;

/// Files taken from one input at most.
const FILES_MAX: usize = 8;

pub const DIR: &str = "/wal";

/// Small segments, so images stay small and rotation is reached. The rest from the default:
/// keel-wal's `mutations` feature (the simulator's) adds a field.
#[allow(clippy::needless_update)]
pub fn config() -> WalConfig {
    WalConfig {
        segment_size_bytes: 8192,
        frame_size_bytes_max: 4096,
        // Larger than a batch frame: such an entry gets a frame of its own.
        entry_size_bytes_max: 6144,
        snapshots_kept: 2,
        snapshot_size_bytes_max: 1 << 20,
        zero_fill_segments: false,
        direct_io: false,
        // Every promise written, as the crash tests do: the strictest judgement of the log.
        promise_write_every_batches: 1,
        ..WalConfig::default()
    }
}

pub fn wal_recovery(data: &[u8]) {
    let mut input = Input::new(data);
    let fix_checksums = input.bool();
    let fs = SimFs::new();
    let dir = Path::new(DIR);
    fs.create_dir_all(dir).expect("mkdir");
    for _ in 0..FILES_MAX {
        if input.is_empty() {
            break;
        }
        let tag = input.u8() % 8;
        let name = match tag {
            0..=3 => segment::segment_file_name(u64::from(tag) + 1),
            4 => snapshot_file_name(LogId::new(u64::from(input.u8()), u64::from(input.u8()))),
            5 => segment::segment_temp_name(1),
            6 => format!("{}.tmp", snapshot_file_name(LogId::new(1, 1))),
            _ => "incarnation".to_string(),
        };
        let len = usize::from(input.u16());
        let content_len = usize::from(input.u16());
        let mut content = input.bytes(content_len).to_vec();
        content.resize(len, 0);
        if fix_checksums && tag <= 3 {
            fix_segment(&mut content, u64::from(tag) + 1);
        }
        let name = if tag == 7 && len % 2 == 1 {
            if fix_checksums {
                fix_promise(&mut content);
            }
            keel_wal::promise::PROMISE_FILE_NAME.to_string()
        } else {
            name
        };
        let path = dir.join(name);
        // A name given twice: the later file wins.
        let _ = fs.remove_file(&path);
        let mut file = fs.create(&path).expect("create");
        file.write_at(&content, 0).expect("write");
        file.sync_data().expect("sync");
    }
    fs.sync_dir(dir).expect("sync dir");
    check_open(&fs);
}

fn check_open(fs: &SimFs) {
    let _ = keel_wal::inspect(fs, Path::new(DIR));
    let Ok((mut wal, recovered)) = Wal::open(fs.clone(), DIR, config()) else {
        return;
    };
    // Recovery is idempotent: the repaired directory holds what was recovered.
    let again = wal.recover().expect("a WAL that opened recovers again");
    let state = &recovered.state;
    assert_eq!(again.hard_state, state.hard_state);
    assert_eq!(again.snapshot, state.snapshot);
    assert_eq!(again.entries, state.entries);
    assert_eq!(again.snapshot_membership, state.snapshot_membership);
    let _ = wal.read_snapshot_data();
    // The WAL's own view of the log agrees with what it recovered.
    for e in &state.entries {
        assert_eq!(
            wal.term_at(e.index),
            Some(e.term),
            "term of entry {}",
            e.index
        );
    }
    // The core either starts from it or refuses it cleanly.
    let _ = keel_core::RaftNode::new(keel_core::Config::new(1), state.clone());
    // The log goes on: one more entry in the current term, then a reopen finds it.
    let last = state.entries.last().map_or(state.snapshot, Entry::log_id);
    if last.index >= keel_core::INDEX_LIMIT - 1 || state.hard_state.term >= keel_core::TERM_LIMIT {
        return;
    }
    let term = state.hard_state.term.max(last.term).max(1);
    let entry = Entry {
        term,
        index: last.index + 1,
        payload: EntryPayload::Normal(bytes::Bytes::from_static(b"after recovery")),
    };
    let write = Write {
        id: 1,
        install: None,
        entries: vec![entry.clone()],
        hard_state: Some(HardState {
            term,
            // A vote belongs to its term.
            vote: state
                .hard_state
                .vote
                .filter(|_| term == state.hard_state.term),
            commit: state.hard_state.commit,
        }),
        purge_to: None,
        sync: true,
        release_promise: false,
        lower_promise_to: None,
    };
    wal.write_batch(std::slice::from_ref(&write))
        .expect("a recovered WAL takes the next entry");
    drop(wal);
    let (_, reopened) = Wal::open(fs.clone(), DIR, config()).expect("reopen after a write");
    assert_eq!(reopened.state.entries.last(), Some(&entry));
}

/// Recomputes the checksum of each promise slot the image holds whole.
fn fix_promise(content: &mut [u8]) {
    use keel_wal::promise::{PROMISE_SLOT_SIZE_BYTES, PROMISE_SLOT_STRIDE_BYTES};
    for slot in 0..2 {
        let at = slot * PROMISE_SLOT_STRIDE_BYTES as usize;
        if let Some(bytes) = content.get_mut(at..at + PROMISE_SLOT_SIZE_BYTES) {
            let crc_at = PROMISE_SLOT_SIZE_BYTES - 4;
            let crc = crc32c::crc32c(&bytes[..crc_at]);
            bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

/// Rewrites a segment image's header (keeping its declared size) and every frame's checksum and
/// end mark, so what the frames say is checked by the recovery rules rather than the checksums.
fn fix_segment(content: &mut [u8], seq: u64) {
    let header_len = SEGMENT_HEADER_SIZE_BYTES as usize;
    if content.len() < header_len {
        return;
    }
    let declared = u64::from_le_bytes(content[24..32].try_into().expect("8 bytes"));
    let size = if declared == 0 {
        content.len() as u64
    } else {
        declared
    };
    content[..header_len].copy_from_slice(&encode_segment_header(seq, size));
    let mut pos = header_len;
    while pos + FRAME_HEADER_SIZE_BYTES <= content.len() {
        let header = read_frame_header(&content[pos..]);
        if !header.magic_ok {
            return;
        }
        let size = frame_size_bytes(header.body_len);
        let Some(end) = pos.checked_add(size).filter(|end| *end <= content.len()) else {
            return;
        };
        let trailer = end - FRAME_TRAILER_SIZE_BYTES;
        let crc = crc32c::crc32c(&content[pos..trailer]);
        content[trailer..trailer + 4].copy_from_slice(&crc.to_le_bytes());
        content[trailer + 4..end].copy_from_slice(&segment::end_mark(header.seq).to_le_bytes());
        pos = end;
    }
}

/// The input that writes `fs`'s WAL directory back (seeds: real WALs made by the writer).
pub fn image(fs: &SimFs, fix_checksums: bool) -> Vec<u8> {
    let mut out = vec![u8::from(fix_checksums)];
    let dir = Path::new(DIR);
    let mut names = fs.list_dir(dir).expect("list");
    names.sort();
    for name in names {
        let content = fs.read_file(&dir.join(&name)).expect("read");
        let mut tag_and_name = Vec::new();
        if let Some(seq) = segment::parse_segment_file_name(&name) {
            if !(1..=4).contains(&seq) {
                continue;
            }
            tag_and_name.push(seq as u8 - 1);
        } else if let Some(rest) = name
            .strip_prefix("snapshot-")
            .and_then(|r| r.strip_suffix(".snap"))
        {
            let (index, term) = rest.split_once('-').expect("snapshot name");
            let (Ok(index), Ok(term)) = (index.parse::<u8>(), term.parse::<u8>()) else {
                continue;
            };
            tag_and_name.extend_from_slice(&[4, index, term]);
        } else {
            continue;
        }
        let Ok(len) = u16::try_from(content.len()) else {
            continue;
        };
        let kept = content.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        out.extend_from_slice(&tag_and_name);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(kept as u16).to_le_bytes());
        out.extend_from_slice(&content[..kept]);
    }
    out
}
