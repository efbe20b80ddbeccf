//! A log storage on redb, an embedded database: keel's log (entries, hard state, the newest
//! snapshot's metadata) kept in a database file instead of keel's write-ahead log. It passes
//! keel's conformance suite, and three nodes run on it in one process.
//!
//! One redb transaction per group commit: a batch of writes commits once, durably
//! (`Durability::Immediate`) when any of them must be synced. A write that carries only a
//! moved commit index may be lost in a crash (`Write::sync` is false): it commits without a
//! sync, and the next synced commit, or closing the storage, makes it durable.
//!
//! Run it with `cargo run -p keel --example redb_storage`.

use std::collections::BTreeMap;
use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;

use bytes::Bytes;
use keel::storage::{self, RecoveredState, SnapshotMeta, Storage, Write};
use keel::{ApplyError, Node, NodeConfig, NodeId, RestoreError, SnapshotWriter};
use keel::{LogId, StateMachine};
use redb::{Database, Durability, ReadableTable, TableDefinition};

/// Entries by index: each an entry record (`keel::storage::encode_entry`).
const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
/// The hard state and the newest snapshot's metadata, as records.
const STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("state");

/// keel's log in one redb database file.
struct RedbStorage {
    db: Database,
    #[cfg(test)]
    path: PathBuf,
}

impl RedbStorage {
    fn open(path: &Path) -> Result<Self, DbError> {
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        txn.open_table(ENTRIES)?;
        txn.open_table(STATE)?;
        txn.commit()?;
        Ok(RedbStorage {
            db,
            #[cfg(test)]
            path: path.to_owned(),
        })
    }
}

/// redb's error, boxed (it is large, and errors are rare).
#[derive(Debug)]
struct DbError(Box<DbError>);

macro_rules! from_redb {
    ($($error:ty),*) => {$(
        impl From<$error> for DbError {
            fn from(e: $error) -> Self {
                DbError(Box::new(e.into()))
            }
        }
    )*};
}
from_redb!(redb::Error, redb::DatabaseError, redb::TransactionError);
from_redb!(redb::TableError, redb::StorageError, redb::CommitError);

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for DbError {}

/// A record that does not decode is a storage error like any other: the node stops on it.
fn corrupt(e: storage::RecordError) -> DbError {
    redb::Error::Corrupted(e.to_string()).into()
}

impl Storage for RedbStorage {
    type Error = DbError;

    fn recover(&self) -> Result<RecoveredState, DbError> {
        let txn = self.db.begin_read()?;
        let state = txn.open_table(STATE)?;
        let mut recovered = RecoveredState::default();
        if let Some(hs) = state.get("hard_state")? {
            recovered.hard_state = storage::decode_hard_state(hs.value()).map_err(corrupt)?;
        }
        if let Some(meta) = state.get("snapshot")? {
            let meta = storage::decode_snapshot_meta(meta.value()).map_err(corrupt)?;
            recovered.snapshot = meta.last;
            recovered.snapshot_membership = (*meta.membership).clone();
            recovered.snapshot_term_history = meta.term_history;
            recovered.applied = meta.last.index;
        }
        for row in txn.open_table(ENTRIES)?.iter()? {
            let (index, record) = row?;
            let entry = storage::decode_entry(index.value(), record.value()).map_err(corrupt)?;
            recovered.entries.push(entry);
        }
        Ok(recovered)
    }

    fn write(&mut self, write: &Write) -> Result<(), DbError> {
        self.write_batch(std::slice::from_ref(write))
    }

    fn write_batch(&mut self, writes: &[Write]) -> Result<(), DbError> {
        let mut txn = self.db.begin_write()?;
        let sync = writes.iter().any(|w| w.sync);
        txn.set_durability(if sync {
            Durability::Immediate
        } else {
            Durability::None
        });
        {
            let mut entries = txn.open_table(ENTRIES)?;
            let mut state = txn.open_table(STATE)?;
            for write in writes {
                if let Some(meta) = &write.install {
                    // The log restarts after the snapshot (recorded already).
                    entries.retain(|_, _| false)?;
                    state.insert("snapshot", &storage::encode_snapshot_meta(meta)[..])?;
                }
                if let Some(first) = write.entries.first() {
                    entries.retain_in(first.index.., |_, _| false)?;
                }
                for entry in &write.entries {
                    entries.insert(entry.index, &storage::encode_entry(entry)[..])?;
                }
                if let Some(hs) = &write.hard_state {
                    state.insert("hard_state", &storage::encode_hard_state(hs)[..])?;
                }
                if let Some(purge_to) = write.purge_to {
                    entries.retain_in(..=purge_to, |_, _| false)?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn record_snapshot(&mut self, meta: &SnapshotMeta) -> Result<(), DbError> {
        let txn = self.db.begin_write()?;
        {
            let mut state = txn.open_table(STATE)?;
            let recorded = match state.get("snapshot")? {
                Some(old) => {
                    storage::decode_snapshot_meta(old.value())
                        .map_err(corrupt)?
                        .last
                }
                None => LogId::ZERO,
            };
            if meta.last.index >= recorded.index {
                state.insert("snapshot", &storage::encode_snapshot_meta(meta)[..])?;
            }
        }
        Ok(txn.commit()?)
    }
}

impl Drop for RedbStorage {
    fn drop(&mut self) {
        // An empty durable commit makes the unsynced ones before it durable too.
        if let Ok(txn) = self.db.begin_write() {
            let _ = txn.commit();
        }
    }
}

/// Counts the entries applied.
#[derive(Default)]
struct Count(u64);

impl StateMachine for Count {
    fn apply(&mut self, _at: LogId, _data: &Bytes) -> Result<Bytes, ApplyError> {
        self.0 += 1;
        Ok(Bytes::copy_from_slice(&self.0.to_le_bytes()))
    }
    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(self.0.to_le_bytes().to_vec())
    }
    fn restore(&mut self, _last: LogId, data: &mut dyn std::io::Read) -> Result<(), RestoreError> {
        let mut bytes = [0u8; 8];
        data.read_exact(&mut bytes)?;
        self.0 = u64::from_le_bytes(bytes);
        Ok(())
    }
}

type Nodes = BTreeMap<NodeId, Node<Count>>;

/// Proposes one entry at the leader.
async fn propose(nodes: &Nodes) -> Result<(), keel::ClientError> {
    loop {
        let leader = nodes[&1].handle().leader().await?;
        match nodes[&leader].handle().propose(Bytes::new()).await {
            Err(keel::ClientError::NotLeader { .. }) => continue,
            result => return result.map(drop),
        }
    }
}

/// Three nodes on redb storages count 20 entries, node 3 stopped for the last 10; restarted on
/// its database, it catches up and leads. Its count, read where it leads.
async fn run(dir: &Path) -> Result<u64, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let config = |id: NodeId, peers: &BTreeMap<NodeId, std::net::SocketAddr>| {
        let mut config = NodeConfig::new(id, 0x6b65656c, dir.join(format!("node-{id}")));
        config.initial_members = vec![1, 2, 3];
        config.peers = peers.clone();
        if let Some(&addr) = peers.get(&id) {
            config.peer_listen_addr = addr;
        }
        config
    };
    let storage = |id: NodeId| RedbStorage::open(&dir.join(format!("log-{id}.redb")));
    let mut nodes = Nodes::new();
    for id in 1..=3 {
        let peers = nodes.iter().map(|(&id, n)| (id, n.peer_addr())).collect();
        let node = Node::start_with_storage(config(id, &peers), Count(0), storage(id)?).await?;
        nodes.insert(id, node);
    }
    for _ in 0..10 {
        propose(&nodes).await?;
    }
    let peers: BTreeMap<_, _> = nodes.iter().map(|(&id, n)| (id, n.peer_addr())).collect();
    nodes.remove(&3).expect("node 3").shutdown().await;
    for _ in 0..10 {
        propose(&nodes).await?;
    }
    let node = Node::start_with_storage(config(3, &peers), Count(0), storage(3)?).await?;
    nodes.insert(3, node);
    // Once node 3 leads, a read there is answered from its own state machine.
    let three = nodes[&3].handle();
    while three.leader().await? != 3 {
        let leader = nodes[&1].handle().leader().await?;
        let _ = nodes[&leader].handle().transfer_leadership(3).await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let count = three.read(|c: &Count| c.0).await?;
    for node in nodes.into_values() {
        node.shutdown().await;
    }
    Ok(count)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("keel-redb-{}", std::process::id()));
    let counts = run(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    println!("node 3 counted {} after its restart", counts?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redb_storage_passes_the_conformance_suite() {
        let dir = std::env::temp_dir().join(format!("keel-redb-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut n = 0;
        let make = || {
            n += 1;
            RedbStorage::open(&dir.join(format!("{n}.redb"))).unwrap()
        };
        // A clean restart: `Drop` makes every commit durable.
        let mut reopen = |s: RedbStorage| {
            let path = s.path.clone();
            drop(s);
            RedbStorage::open(&path).expect("reopen")
        };
        storage::conformance::run_all(make, Some(&mut reopen));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_nodes_on_redb_agree_after_a_restart() {
        let dir = std::env::temp_dir().join(format!("keel-redb-test-{}", std::process::id()));
        let counts = run(&dir).await;
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(counts.expect("the example runs"), 20);
    }
}
