//! The storage incarnation each peer announced, remembered across restarts (S37).
//!
//! A data directory gets a random incarnation when it is created. A member whose disk was wiped
//! and that restarts under the same id comes back with another one: it has forgotten the votes
//! it granted and the entries it acknowledged, so a peer that knew it refuses its connections
//! (everything it would say — votes, acknowledgements — travels on its own outbound connections)
//! until it is removed from the configuration, which forgets the old incarnation, and added back.
//! A member seen for the first time (a new member, or a founding member that started late) is
//! accepted and remembered.
//!
//! File format (`peer-incarnations` in the data directory), version 1, text: a first line
//! `keel-peer-incarnations 1`, then one line `<node id> <incarnation>` per peer, both decimal.
//! Replaced atomically (temporary name, fsync, rename, directory fsync).

use std::collections::BTreeMap;
use std::io::{self, Write as _};
use std::path::PathBuf;

use keel_core::NodeId;

const HEADER: &str = "keel-peer-incarnations 1";

#[derive(Debug, Default)]
pub(crate) struct Incarnations {
    path: Option<PathBuf>,
    known: BTreeMap<NodeId, u64>,
}

impl Incarnations {
    /// Loads the file at `path` (absent: nothing known yet). `None`: remembered in memory only.
    pub(crate) fn load(path: Option<PathBuf>) -> io::Result<Incarnations> {
        let mut known = BTreeMap::new();
        if let Some(path) = &path {
            match std::fs::read_to_string(path) {
                Ok(text) => {
                    let mut lines = text.lines();
                    if lines.next() != Some(HEADER) {
                        return Err(invalid(path, "unknown header"));
                    }
                    for line in lines {
                        let mut fields = line.split(' ');
                        let parsed = match (fields.next(), fields.next(), fields.next()) {
                            (Some(id), Some(inc), None) => id.parse().ok().zip(inc.parse().ok()),
                            _ => None,
                        };
                        let (id, inc) = parsed.ok_or_else(|| invalid(path, line))?;
                        known.insert(id, inc);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Incarnations { path, known })
    }

    /// Accepts `node` announcing `incarnation` if it is the one known (or the first seen, which
    /// is then remembered durably); otherwise returns the known one.
    pub(crate) fn check(&mut self, node: NodeId, incarnation: u64) -> Result<(), u64> {
        match self.known.get(&node) {
            Some(&known) if known == incarnation => Ok(()),
            Some(&known) => Err(known),
            None => {
                self.known.insert(node, incarnation);
                self.persist();
                Ok(())
            }
        }
    }

    /// `node` left the configuration: whatever storage it comes back with is new.
    pub(crate) fn forget(&mut self, node: NodeId) {
        if self.known.remove(&node).is_some() {
            self.persist();
        }
    }

    fn persist(&self) {
        let Some(path) = &self.path else { return };
        if let Err(e) = self.write(path) {
            // Still enforced in memory; only a restart of this node would forget it.
            tracing::error!(path = %path.display(), "cannot record peer incarnations: {e}");
        }
    }

    fn write(&self, path: &PathBuf) -> io::Result<()> {
        let mut text = format!("{HEADER}\n");
        for (id, inc) in &self.known {
            text.push_str(&format!("{id} {inc}\n"));
        }
        let temp = path.with_extension("tmp");
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

fn invalid(path: &std::path::Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: unreadable line {what:?}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_seen_is_remembered_across_a_reload_and_a_change_is_refused() {
        let dir = std::env::temp_dir().join(format!("keel-incarnations-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("peer-incarnations");
        let _ = std::fs::remove_file(&path);
        let mut a = Incarnations::load(Some(path.clone())).unwrap();
        assert_eq!(a.check(2, 77), Ok(()));
        assert_eq!(a.check(2, 77), Ok(()));
        assert_eq!(a.check(3, 5), Ok(()));
        let mut b = Incarnations::load(Some(path.clone())).unwrap();
        assert_eq!(
            b.check(2, 78),
            Err(77),
            "a wiped member is refused after a reload"
        );
        b.forget(2);
        assert_eq!(
            b.check(2, 78),
            Ok(()),
            "once removed, new storage is accepted"
        );
        let mut c = Incarnations::load(Some(path.clone())).unwrap();
        assert_eq!(c.check(2, 77), Err(78));
        assert_eq!(c.check(3, 5), Ok(()));
        std::fs::write(&path, "something else\n").unwrap();
        assert!(Incarnations::load(Some(path)).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
