//! The storage incarnation each peer announced, remembered across restarts (scenario S37).
//!
//! A data directory gets a random incarnation when it is created. A member whose disk was wiped
//! and that restarts under the same id comes back with another one: it has forgotten the votes
//! it granted and the entries it acknowledged, so a peer that knew it refuses its connections
//! (everything it would say — votes, acknowledgements — travels on its own outbound connections)
//! until it is removed from the configuration, which forgets the old incarnation, and added back.
//! A member seen for the first time (a new member, or a founding member that started late) is
//! accepted and remembered. A node outside the configuration is heard but not remembered: a
//! removed member still running must not pin its old storage, or it would be refused once it
//! is added back with a new disk.
//!
//! File format (`peer-incarnations` in the data directory), version 1, text: a first line
//! `keel-peer-incarnations 1`, then one line `<node id> <incarnation>` per peer, both decimal.
//! Replaced atomically: written under a temporary name and synced, renamed over the old file,
//! then the directory synced. A crash leaves either the old file or the new one.
//!
//! Generic over [`keel_wal::Fs`]: the runtime keeps the file on its data directory, the
//! simulator on each node's simulated disk (a wiped disk forgets it, as a real one does).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use keel_core::NodeId;
use keel_wal::{FileHandle, Fs};

/// The record's file name in the data directory (format in the module documentation).
pub const INCARNATIONS_FILE_NAME: &str = "peer-incarnations";
const TEMP_FILE_NAME: &str = "peer-incarnations.tmp";
const HEADER: &str = "keel-peer-incarnations 1";
/// Bounds the file read at startup: one line per member ever heard of, each under 45 bytes.
const FILE_BYTES_MAX: u64 = 1 << 20;

/// The incarnations peers announced. `dir: None` remembers in memory only.
#[derive(Debug)]
pub struct Incarnations<F: Fs> {
    fs: F,
    dir: Option<PathBuf>,
    known: BTreeMap<NodeId, u64>,
    /// The members of the configuration: only their first-seen incarnations are remembered.
    members: BTreeSet<NodeId>,
    /// The last failure to make the record durable, for the shell to report. It is still
    /// enforced in memory; only a restart of this node would forget it.
    persist_error: Option<io::Error>,
}

impl<F: Fs> Incarnations<F> {
    /// Loads the record in `dir` (absent: nothing known yet).
    pub fn load(fs: F, dir: Option<PathBuf>) -> io::Result<Incarnations<F>> {
        let mut known = BTreeMap::new();
        if let Some(dir) = &dir {
            let path = dir.join(INCARNATIONS_FILE_NAME);
            if let Some(text) = read_if_present(&fs, &path)? {
                let mut lines = text.lines();
                if lines.next() != Some(HEADER) {
                    return Err(invalid(&path, "unknown header"));
                }
                for line in lines {
                    let mut fields = line.split(' ');
                    let parsed = match (fields.next(), fields.next(), fields.next()) {
                        (Some(id), Some(inc), None) => id.parse().ok().zip(inc.parse().ok()),
                        _ => None,
                    };
                    let (id, inc) = parsed
                        .ok_or_else(|| invalid(&path, &format!("unreadable line {line:?}")))?;
                    known.insert(id, inc);
                }
            }
        }
        Ok(Incarnations {
            fs,
            dir,
            known,
            members: BTreeSet::new(),
            persist_error: None,
        })
    }

    /// Accepts `node` announcing `incarnation` if it is the one known, or none is (the first
    /// seen of a member is then remembered durably); otherwise returns the known one.
    pub fn check(&mut self, node: NodeId, incarnation: u64) -> Result<(), u64> {
        match self.known.get(&node) {
            Some(&known) if known == incarnation => Ok(()),
            Some(&known) => Err(known),
            None => {
                if self.members.contains(&node) {
                    self.known.insert(node, incarnation);
                    self.persist();
                }
                Ok(())
            }
        }
    }

    /// The configuration's members now. What is known of a node outside it is forgotten, so
    /// that nothing known outlives a membership (a departure the node did not see leave, as in
    /// a crash between a configuration entry's write and its observation, included).
    pub fn set_members(&mut self, members: BTreeSet<NodeId>) {
        let before = self.known.len();
        self.known.retain(|id, _| members.contains(id));
        self.members = members;
        if self.known.len() != before {
            self.persist();
        }
    }

    /// `node` left the configuration: whatever storage it comes back with is new.
    pub fn forget(&mut self, node: NodeId) {
        if self.known.remove(&node).is_some() {
            self.persist();
        }
    }

    /// The `keep-departed-incarnations` mutation: the members change, nothing is forgotten.
    #[cfg(feature = "mutations")]
    pub(super) fn set_members_forgetting_nothing(&mut self, members: BTreeSet<NodeId>) {
        self.members = members;
    }

    /// Forgets every peer's incarnation (each is learned again as its member next connects).
    pub fn forget_all(&mut self) {
        if !self.known.is_empty() {
            self.known.clear();
            self.persist();
        }
    }

    /// The incarnation remembered for `node`; `None` if none is (never seen, not a member when
    /// seen, or forgotten since).
    pub fn known(&self, node: NodeId) -> Option<u64> {
        self.known.get(&node).copied()
    }

    /// The last failure to make the record durable, once.
    pub fn take_persist_error(&mut self) -> Option<io::Error> {
        self.persist_error.take()
    }

    fn persist(&mut self) {
        let Some(dir) = &self.dir else { return };
        if let Err(e) = write_atomically(&self.fs, dir, &self.known) {
            self.persist_error = Some(e);
        }
    }
}

fn write_atomically<F: Fs>(fs: &F, dir: &Path, known: &BTreeMap<NodeId, u64>) -> io::Result<()> {
    let mut text = format!("{HEADER}\n");
    for (id, inc) in known {
        text.push_str(&format!("{id} {inc}\n"));
    }
    let temp = dir.join(TEMP_FILE_NAME);
    match fs.remove_file(&temp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut file = fs.create(&temp)?;
    file.write_at(text.as_bytes(), 0)?;
    file.sync_data()?;
    drop(file);
    fs.rename(&temp, &dir.join(INCARNATIONS_FILE_NAME))?;
    fs.sync_dir(dir)
}

fn read_if_present<F: Fs>(fs: &F, path: &Path) -> io::Result<Option<String>> {
    let file = match fs.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.len_bytes()?;
    if len > FILE_BYTES_MAX {
        return Err(invalid(path, "file larger than the bound"));
    }
    let mut bytes = vec![0u8; len as usize];
    let mut read = 0;
    while read < bytes.len() {
        let n = file.read_at(&mut bytes[read..], read as u64)?;
        if n == 0 {
            break;
        }
        read += n;
    }
    bytes.truncate(read);
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| invalid(path, "not text"))
}

fn invalid(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}
