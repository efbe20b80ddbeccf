//! Offline recovery for a quorum lost for good: make one node the single voter of a new
//! configuration, from its own log (as etcd's `--force-new-cluster`).
//!
//! What it does, with the node stopped: open its data directory, append one configuration entry
//! `{voters: [id]}` after its last entry, in a term above every term it has seen (so no entry of
//! the old cluster can ever be mistaken for one of the new configuration), with its vote for
//! itself in that term, and forget the storage incarnations of its old peers. Started again, the
//! node is the only voter: it elects itself, commits its whole log (entries the old cluster had
//! not committed included: they may or may not have been acknowledged to clients; this is the
//! price of leaving a lost quorum behind) and serves. New members join with `RAFT.MEMBER ADD`
//! and empty data directories.
//!
//! Never run it while the old cluster could come back: two clusters with the same history would
//! then accept different writes. It refuses a data directory with nothing in it, and a node that
//! was not a member of its own last configuration.

use std::path::Path;
use std::sync::Arc;

use keel_core::{Entry, EntryPayload, HardState, LogId, Membership, NodeId, Write};
use keel_wal::{StdFs, Wal, WalConfig};

/// What [`force_new_cluster`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForcedCluster {
    /// The configuration the node's log ended with.
    pub previous: Membership,
    /// The new configuration entry (its term is the new term).
    pub entry: LogId,
    /// The commit index the log keeps (the rest of it commits once the node runs).
    pub commit: u64,
}

/// Why an offline recovery did not run or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The log could not be read or rewritten.
    #[error("storage: {0}")]
    Wal(#[from] keel_wal::WalError),
    /// A file outside the log (the data directory, a lock) could not be used.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The recovery would be unsafe as asked; the message says why and what to do instead.
    #[error("{0}")]
    Refused(String),
}

/// Makes node `id` the single voter of a new configuration in the data directory `data_dir`
/// (see the module documentation). The node must be stopped.
pub fn force_new_cluster(data_dir: &Path, id: NodeId) -> Result<ForcedCluster, RecoverError> {
    if !data_dir.is_dir() {
        return Err(RecoverError::Refused(format!(
            "{} is not a directory",
            data_dir.display()
        )));
    }
    let (mut wal, recovered) = Wal::open(StdFs, data_dir, WalConfig::default())?;
    let state = recovered.state;
    let last = state
        .entries
        .last()
        .map_or(state.snapshot, |entry| entry.log_id());
    if last.index == 0 && state.hard_state == HardState::default() {
        return Err(RecoverError::Refused(format!(
            "{} holds no log: nothing to recover",
            data_dir.display()
        )));
    }
    let previous = state
        .entries
        .iter()
        .rev()
        .find_map(|entry| match &entry.payload {
            EntryPayload::Membership(m) => Some(Membership::clone(m)),
            _ => None,
        })
        .unwrap_or_else(|| state.snapshot_membership.clone());
    if !previous.contains(id) {
        return Err(RecoverError::Refused(format!(
            "node {id} is not a member of its log's last configuration {previous:?}: is this \
             its data directory?"
        )));
    }
    let term = state.hard_state.term.max(last.term) + 1;
    let entry = Entry {
        term,
        index: last.index + 1,
        payload: EntryPayload::Membership(Arc::new(Membership::new_voters([id]))),
    };
    let commit = state.hard_state.commit;
    wal.write_batch(&[Write {
        id: 1,
        install: None,
        entries: vec![entry.clone()],
        hard_state: Some(HardState {
            term,
            vote: Some(id),
            commit,
        }),
        purge_to: None,
        sync: true,
        release_promise: false,
        lower_promise_to: None,
    }])?;
    // The old peers' storage incarnations: members re-added to the new cluster come with new
    // storage, and must not be refused as wiped old members.
    match std::fs::remove_file(data_dir.join("peer-incarnations")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    Ok(ForcedCluster {
        previous,
        entry: entry.log_id(),
        commit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("keel-recover-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(dir: &Path, entries: Vec<Entry>, hard_state: HardState) {
        let (mut wal, _) = Wal::open(StdFs, dir, WalConfig::default()).unwrap();
        wal.save_snapshot(&keel_wal::bootstrap_meta([1, 2, 3]), &[])
            .unwrap();
        wal.write_batch(&[Write {
            id: 1,
            install: None,
            entries,
            hard_state: Some(hard_state),
            purge_to: None,
            sync: true,
            release_promise: false,
            lower_promise_to: None,
        }])
        .unwrap();
    }

    fn normal(term: u64, index: u64) -> Entry {
        Entry {
            term,
            index,
            payload: EntryPayload::Normal(bytes::Bytes::from_static(b"x")),
        }
    }

    #[test]
    fn appends_a_single_voter_configuration_in_a_new_term() {
        let dir = temp_dir("append");
        let hs = HardState {
            term: 4,
            vote: Some(2),
            commit: 2,
        };
        write(&dir, vec![normal(2, 1), normal(3, 2), normal(3, 3)], hs);
        std::fs::write(dir.join("peer-incarnations"), "2 77\n").unwrap();
        let forced = force_new_cluster(&dir, 2).unwrap();
        assert_eq!(forced.previous, Membership::new_voters([1, 2, 3]));
        assert_eq!(forced.entry, LogId::new(5, 4));
        assert_eq!(forced.commit, 2);
        assert!(!dir.join("peer-incarnations").exists());

        let (_, recovered) = Wal::open(StdFs, &dir, WalConfig::default()).unwrap();
        let state = recovered.state;
        assert_eq!(
            state.hard_state,
            HardState {
                term: 5,
                vote: Some(2),
                commit: 2
            }
        );
        assert_eq!(state.entries.len(), 4, "the old log is kept whole");
        let node = keel_core::RaftNode::new(keel_core::Config::new(2), state).unwrap();
        assert_eq!(node.membership(), &Membership::new_voters([2]));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn refuses_an_empty_directory_and_a_stranger() {
        let empty = temp_dir("empty");
        assert!(matches!(
            force_new_cluster(&empty, 1),
            Err(RecoverError::Refused(_))
        ));
        let dir = temp_dir("stranger");
        write(&dir, vec![normal(1, 1)], HardState::default());
        assert!(matches!(
            force_new_cluster(&dir, 9),
            Err(RecoverError::Refused(_))
        ));
        let _ = std::fs::remove_dir_all(&empty);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
