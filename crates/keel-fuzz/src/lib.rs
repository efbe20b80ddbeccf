//! Fuzz targets: one function per decoder of untrusted bytes, each of which must return normally
//! for every input. That is the property the fuzzer checks (a panic, an overflow or a failed
//! debug assertion is a crash); where a decoder accepts its input and the format has an encoder,
//! the target also checks that encoding the result and decoding it again gives the same value.
//!
//! | target | bytes from | what runs |
//! |---|---|---|
//! | `raft_step` | a peer | peer messages (the wire decoder's and compact ones) through `RaftNode::validate` then `step`, as the runtime's node task steps them, between ticks, proposals, reads, snapshots, completions and restarts from what storage made durable |
//! | `resp_decode` | a client | the RESP request decoder: stateless and incremental decoding agree, multibulk and inline requests round-trip |
//! | `peer_frame` | a peer | the frame splitter and every frame body on a message connection |
//! | `handshake` | a peer | the handshake, its extension records, the authentication exchange (both sides) and the record layer |
//! | `snapshot_chunk` | a peer | the snapshot channel: offer, chunk headers and their data, and the snapshot file the chunks assemble into |
//! | `wal_recovery` | the disk | WAL segments and snapshot files written into `SimFs`, then `Wal::open` |
//!
//! The coverage-guided harness (AFL++ through the `afl` crate) is in the repository's `fuzz/`
//! directory, outside the workspace; `scripts/fuzz` runs it. The seed corpora and every crash
//! input found are replayed by this crate's tests (`tests/replay.rs`), so CI runs them all.

mod input;
pub mod raft_step;
pub mod resp_decode;
pub mod seeds;
pub mod wal_recovery;
pub mod wire;

use std::path::{Path, PathBuf};

pub use input::Input;

/// A fuzz target: must not panic, whatever `data` holds.
pub type Target = fn(&[u8]);

/// Every target by name.
pub const TARGETS: &[(&str, Target)] = &[
    ("raft_step", raft_step::raft_step),
    ("resp_decode", resp_decode::resp_decode),
    ("peer_frame", wire::peer_frame),
    ("handshake", wire::handshake),
    ("snapshot_chunk", wire::snapshot_chunk),
    ("wal_recovery", wal_recovery::wal_recovery),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Where this crate's seed corpus and crash inputs for `target` are kept.
pub fn corpus_dirs(target: &str) -> [PathBuf; 2] {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    [
        root.join("corpus").join(target),
        root.join("regressions").join(target),
    ]
}

/// One input that made its target panic: the file and the panic message.
#[derive(Debug)]
pub struct Failure {
    pub path: PathBuf,
    pub message: String,
}

/// Runs every file in `dir` (if it exists) through `target`, catching panics; returns how many
/// files ran and the ones that panicked.
pub fn replay_dir(dir: &Path, target: Target) -> std::io::Result<(usize, Vec<Failure>)> {
    let mut failures = Vec::new();
    let mut ran = 0;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, failures)),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.sort();
    for path in paths {
        if !path.is_file() || path.file_name().is_some_and(|n| n == "README.md") {
            continue;
        }
        let data = std::fs::read(&path)?;
        ran += 1;
        if let Err(panic) = std::panic::catch_unwind(|| target(&data)) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic payload".to_string());
            failures.push(Failure { path, message });
        }
    }
    Ok((ran, failures))
}
