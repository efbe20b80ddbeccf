//! A key-value state machine that keeps its state in a database file of its own (redb), not in
//! memory: a restart resumes from what the database holds instead of restoring keel's snapshot
//! and replaying the log after it (`StateMachine::durable`).
//!
//! Each entry is applied in one redb write transaction together with its `LogId`. Most of them
//! commit without a sync (`Durability::None`: lost in a crash, as any database's unsynced writes
//! are); every 64th entry, or the first one 50 ms after the last sync, commits durably, and that
//! entry is what `durable()` reports. keel keeps its log after it, and applies again at start
//! what a crash lost. Run it twice on one directory: the second run replays nothing.
//!
//! ```sh
//! cargo run -p keel --example durable_kv -- --dir data/durable-kv
//! ```
//!
//! Its test writes from a node process, kills it with SIGKILL, and checks that what `durable()`
//! reported before the kill survived it, and that the restarted node holds every acknowledged
//! write and applied again only what the database had lost.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel::{ApplyError, LogId, Node, NodeConfig, RestoreError, SnapshotWriter, StateMachine};
use redb::{Database, Durability, ReadTransaction, ReadableTable, ReadableTableMetadata};
use redb::{TableDefinition, WriteTransaction};

/// "durable" in ASCII: nodes of another cluster are refused at their handshake.
const CLUSTER_ID: u64 = 0x0064_7572_6162_6c65;

/// The keys and their values.
const PAIRS: TableDefinition<&str, &[u8]> = TableDefinition::new("pairs");
/// `APPLIED`: the entry the pairs reflect, as (term, index); after a restore, the snapshot's last
/// entry. Absent in a new database.
const META: TableDefinition<&str, (u64, u64)> = TableDefinition::new("meta");
const APPLIED: &str = "applied";

/// A durable commit after this many entries committed without one...
const SYNC_EVERY_ENTRIES: u64 = 64;
/// ...or on the first entry this long after the last durable commit.
const SYNC_INTERVAL: Duration = Duration::from_millis(50);

/// The first byte of every entry and snapshot, so that a later build still reads what this one
/// wrote (the log outlives the binary).
const FORMAT_VERSION: u8 = 1;
const PUT: u8 = 1;
const DELETE: u8 = 2;
const KEY_BYTES_MAX: usize = 1 << 10;
const VALUE_BYTES_MAX: usize = 1 << 20;

/// redb's errors (boxed: they are large, and rare) and a snapshot that does not read.
type Error = Box<dyn std::error::Error + Send + Sync>;

/// What this process's state machine did: the example's output, and what its test checks.
#[derive(Clone, Copy, Debug, Default)]
struct Activity {
    applies: u64,
    first_applied: Option<u64>,
    restores: u64,
}

struct DurableKv {
    db: Database,
    /// The last entry committed durably: what the database holds if the process dies now.
    durable: Option<LogId>,
    /// Entries committed without a sync since then.
    unsynced: u64,
    last_sync: Instant,
    activity: Activity,
}

/// An entry: `[version, PUT or DELETE, key length (u32 LE), key, value]`.
fn encode(op: u8, key: &str, value: &[u8]) -> Bytes {
    let mut entry = Vec::with_capacity(6 + key.len() + value.len());
    entry.extend_from_slice(&[FORMAT_VERSION, op]);
    entry.extend_from_slice(&(key.len() as u32).to_le_bytes());
    entry.extend_from_slice(key.as_bytes());
    entry.extend_from_slice(value);
    entry.into()
}

/// An entry's operation, key and value; `None` for one this build does not apply. Keys and
/// values over their bounds are refused here, so that every snapshot restores.
fn decode(entry: &[u8]) -> Option<(u8, &str, &[u8])> {
    let (header, rest) = entry.split_first_chunk::<6>()?;
    let [version, op, key_len @ ..] = *header;
    let (key, value) = rest.split_at_checked(u32::from_le_bytes(key_len) as usize)?;
    let key = std::str::from_utf8(key).ok()?;
    let fits = key.len() <= KEY_BYTES_MAX && value.len() <= VALUE_BYTES_MAX;
    (version == FORMAT_VERSION && fits).then_some((op, key, value))
}

impl DurableKv {
    /// Opens (or creates) the database. After a crash redb rolls back to its last durable commit,
    /// whose `APPLIED` is what the database holds.
    fn open(path: &Path) -> Result<DurableKv, Error> {
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        txn.open_table(PAIRS)?;
        let applied = txn.open_table(META)?.get(APPLIED)?.map(|id| id.value());
        txn.commit()?;
        Ok(DurableKv {
            db,
            durable: applied.map(|(term, index)| LogId::new(term, index)),
            unsynced: 0,
            last_sync: Instant::now(),
            activity: Activity::default(),
        })
    }

    /// A read from the last commit, synced or not: what the state machine applied.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        let txn = self.db.begin_read()?;
        let value = txn.open_table(PAIRS)?.get(key)?.map(|v| v.value().to_vec());
        Ok(value)
    }

    /// Applies `data` and records `at` in one transaction: a crash keeps both or neither.
    fn write(&self, at: LogId, data: &[u8], sync: bool) -> Result<Result<Bytes, Bytes>, Error> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(if sync {
            Durability::Immediate
        } else {
            Durability::None
        });
        let result = {
            let mut pairs = txn.open_table(PAIRS)?;
            match decode(data) {
                Some((PUT, key, value)) => pairs.insert(key, value).map(|_| Ok(Bytes::new()))?,
                Some((DELETE, key, _)) => {
                    let existed = pairs.remove(key)?.is_some();
                    Ok(Bytes::from(vec![u8::from(existed)]))
                }
                // Refused alike on every node, the pairs unchanged; the entry still counts.
                _ => Err(Bytes::from_static(b"not a kv entry")),
            }
        };
        txn.open_table(META)?.insert(APPLIED, (at.term, at.index))?;
        txn.commit()?;
        Ok(result)
    }

    /// Replaces the pairs by a snapshot's, read pair by pair into one transaction.
    fn replace_pairs(&self, txn: &WriteTransaction, data: &mut dyn Read) -> Result<(), Error> {
        let mut header = [0u8; 9];
        data.read_exact(&mut header)?;
        let [version, count @ ..] = header;
        if version != FORMAT_VERSION {
            return Err(format!("snapshot format {version} unknown").into());
        }
        let mut pairs = txn.open_table(PAIRS)?;
        pairs.retain(|_, _| false)?;
        for _ in 0..u64::from_le_bytes(count) {
            let key = String::from_utf8(read_field(data, KEY_BYTES_MAX)?)?;
            pairs.insert(key.as_str(), &read_field(data, VALUE_BYTES_MAX)?[..])?;
        }
        Ok(())
    }
}

impl StateMachine for DurableKv {
    /// A put answers nothing; a delete answers `[1]` if the key was there, `[0]` if not.
    fn apply(&mut self, at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
        self.activity.applies += 1;
        self.activity.first_applied.get_or_insert(at.index);
        // The clock decides only when to sync, never what the state becomes: every node still
        // reaches the same pairs from the same entries.
        let sync =
            self.unsynced + 1 >= SYNC_EVERY_ENTRIES || self.last_sync.elapsed() >= SYNC_INTERVAL;
        let result = self.write(at, data, sync);
        let result = result.map_err(|e| ApplyError::Fatal(format!("the database: {e}")))?;
        if sync {
            self.durable = Some(at);
            self.unsynced = 0;
            self.last_sync = Instant::now();
        } else {
            self.unsynced += 1;
        }
        result.map_err(ApplyError::Refused)
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        // A read transaction sees the last commit (the applied index) and keeps seeing it while
        // apply goes on: redb's MVCC is the copy-on-write view, and apply waits for the opening
        // only.
        Box::new(PairsSnapshot(self.db.begin_read().map_err(Error::from)))
    }

    fn restore(&mut self, last: LogId, data: &mut dyn Read) -> Result<(), RestoreError> {
        self.activity.restores += 1;
        // The pairs and the snapshot's last entry in one durable transaction: a start after a
        // crash resumes after the snapshot, never applies again what it covers.
        let restored = (|| -> Result<(), Error> {
            let mut txn = self.db.begin_write()?;
            txn.set_durability(Durability::Immediate);
            self.replace_pairs(&txn, data)?;
            txn.open_table(META)?
                .insert(APPLIED, (last.term, last.index))?;
            Ok(txn.commit()?)
        })();
        // On an error the transaction was dropped uncommitted: the database is as it was.
        restored.map_err(|e| RestoreError(e.to_string()))?;
        self.durable = Some(last);
        self.unsynced = 0;
        self.last_sync = Instant::now();
        Ok(())
    }

    fn durable(&self) -> Option<LogId> {
        self.durable
    }
}

impl Drop for DurableKv {
    fn drop(&mut self) {
        // A clean stop: an empty durable commit makes the unsynced ones before it durable too.
        if let Ok(txn) = self.db.begin_write() {
            let _ = txn.commit();
        }
    }
}

/// A snapshot: `[version, pairs (u64 LE)]`, then each pair in key order (the same bytes on every
/// node): `[key length (u32 LE), key, value length (u32 LE), value]`. Written on keel's snapshot
/// thread from the read transaction, a pair at a time.
struct PairsSnapshot(Result<ReadTransaction, Error>);

impl SnapshotWriter for PairsSnapshot {
    fn write_to(self: Box<Self>, out: &mut dyn Write) -> io::Result<()> {
        let txn = self.0.map_err(io::Error::other)?;
        let pairs = txn.open_table(PAIRS).map_err(io::Error::other)?;
        out.write_all(&[FORMAT_VERSION])?;
        out.write_all(&pairs.len().map_err(io::Error::other)?.to_le_bytes())?;
        for pair in pairs.iter().map_err(io::Error::other)? {
            let (key, value) = pair.map_err(io::Error::other)?;
            for field in [key.value().as_bytes(), value.value()] {
                out.write_all(&(field.len() as u32).to_le_bytes())?;
                out.write_all(field)?;
            }
        }
        Ok(())
    }
}

/// A length-prefixed field, refused past `max` bytes rather than allocated.
fn read_field(data: &mut dyn Read, max: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    data.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(io::Error::other(format!("a field of {len} bytes")));
    }
    let mut field = vec![0u8; len];
    data.read_exact(&mut field)?;
    Ok(field)
}

/// Node 1 of a cluster of one on the state machine, its data directory beside the database; once
/// it leads (its start replayed what the state machine lacked by then).
async fn start(dir: &Path, kv: DurableKv) -> Result<Node<DurableKv>, Error> {
    let mut config = NodeConfig::new(1, CLUSTER_ID, dir.join("node"));
    config.initial_members = vec![1];
    let node = Node::start(config, kv).await?;
    node.handle().leader().await?;
    Ok(node)
}

async fn run(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir)?;
    let kv = DurableKv::open(&dir.join("kv.redb"))?;
    let held = kv.durable().map_or(0, |id| id.index);
    let node = start(dir, kv).await?;
    let handle = node.handle();
    let replay = handle.status().await?.replay;
    println!(
        "the database held the entries up to {held}; keel replayed {} more, up to its commit \
         index {}",
        replay.entries, replay.target_index
    );
    let runs = handle.read(|kv: &DurableKv| kv.get("runs")).await??;
    let runs = runs.map_or(0, |n| u64::from_le_bytes(n.try_into().unwrap_or_default())) + 1;
    handle
        .propose(encode(PUT, "runs", &runs.to_le_bytes()))
        .await?;
    for i in 0..100 {
        let value = format!("value {i} of run {runs}");
        handle
            .propose(encode(PUT, &format!("k{i}"), value.as_bytes()))
            .await?;
    }
    handle.propose(encode(DELETE, "k0", b"")).await?;
    let value = handle.read(|kv: &DurableKv| kv.get("k99")).await??;
    let activity = handle.read(|kv: &DurableKv| kv.activity).await?;
    println!(
        "run {runs}: wrote k0 to k99 and deleted k0 ({} entries applied); k99 = {:?}",
        activity.applies,
        String::from_utf8_lossy(&value.unwrap_or_default())
    );
    node.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, temporary) = match &args[..] {
        [flag, dir] if flag == "--dir" => (PathBuf::from(dir), false),
        [] => {
            let name = format!("keel-durable-kv-{}", std::process::id());
            (std::env::temp_dir().join(name), true)
        }
        _ => {
            eprintln!("usage: durable_kv [--dir DIR]");
            std::process::exit(2);
        }
    };
    let result = run(&dir).await;
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Err(error) = result {
        eprintln!("durable_kv: {error}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader, Read};
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc::{self, RecvTimeoutError};
    use std::time::Duration;

    use keel::{LogId, StateMachine};

    use super::{encode, start, DurableKv, Error, DELETE, PUT, SYNC_EVERY_ENTRIES};

    /// A directory of its own under the system's temporary one, removed when dropped unless the
    /// test failed (then it is kept, to look at).
    struct ScratchDir(PathBuf);

    impl ScratchDir {
        fn new(name: &str) -> ScratchDir {
            let dir =
                std::env::temp_dir().join(format!("keel-durable-kv-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            ScratchDir(dir)
        }
    }

    impl Drop for ScratchDir {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!("kept {}", self.0.display());
            } else {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn get(kv: &DurableKv, key: &str) -> Option<Vec<u8>> {
        kv.get(key).expect("the database reads")
    }

    #[test]
    fn a_restore_replaces_the_pairs_and_records_the_snapshots_position() {
        let dir = ScratchDir::new("restore");
        let mut source = DurableKv::open(&dir.0.join("source.redb")).unwrap();
        let entries = [
            encode(PUT, "b", b"2"),
            encode(PUT, "a", b"1"),
            encode(DELETE, "b", b""),
        ];
        for (index, entry) in (1..).zip(&entries) {
            source.apply(LogId::new(1, index), entry).expect("applied");
        }
        let mut snapshot = Vec::new();
        source.snapshot_view().write_to(&mut snapshot).unwrap();
        let pairs = 1u64.to_le_bytes();
        let expected = [&[1][..], &pairs, &[1, 0, 0, 0, b'a', 1, 0, 0, 0, b'1']].concat();
        assert_eq!(snapshot, expected, "the pairs in key order");

        let path = dir.0.join("target.redb");
        let mut target = DurableKv::open(&path).unwrap();
        for index in 1..=SYNC_EVERY_ENTRIES {
            target
                .apply(LogId::new(1, index), &encode(PUT, "old", b"x"))
                .expect("applied");
        }
        let synced = target.durable().expect("synced within 64 entries");
        // A snapshot cut short fails the restore, and leaves the database as it was.
        let cut = &mut &snapshot[..snapshot.len() - 1];
        let at = LogId::new(2, 80);
        assert!(target.restore(at, cut).is_err());
        assert_eq!(get(&target, "old"), Some(b"x".to_vec()));
        assert_eq!(target.durable(), Some(synced));

        target.restore(at, &mut &snapshot[..]).expect("restored");
        assert_eq!(get(&target, "a"), Some(b"1".to_vec()));
        assert_eq!(get(&target, "old"), None);
        assert_eq!(target.durable(), Some(at), "durable with the pairs");
        drop(target);
        let reopened = DurableKv::open(&path).unwrap();
        assert_eq!(reopened.durable(), Some(at), "recorded with them");
        assert_eq!(get(&reopened, "a"), Some(b"1".to_vec()));
    }

    /// Where `child` keeps its database and its node's data directory.
    const DIR: &str = "DURABLE_KV_TEST_DIR";
    /// How many keys (`k0`, `k1`, ...) were acknowledged before `child` starts: it checks them.
    const KEYS: &str = "DURABLE_KV_TEST_KEYS";
    /// Set: `child` goes on writing `k<KEYS>` and the keys after it until it is killed (taking a
    /// snapshot after `SNAPSHOT_AFTER` of them). Unset: it stops cleanly after its check.
    const WRITE: &str = "DURABLE_KV_TEST_WRITE";
    const SNAPSHOT_AFTER: u64 = 100;

    /// A node process of `a_node_killed_while_writing_applies_again_only_what_its_database_lost`
    /// (this test binary, started again with `DIR` set). It prints `name=value` fields.
    #[test]
    #[ignore = "a node process, started by a_node_killed_while_writing_applies_again_only_what_its_database_lost"]
    fn child() {
        let Ok(dir) = std::env::var(DIR) else {
            return;
        };
        let keys = std::env::var(KEYS).expect("KEYS is set").parse().unwrap();
        // Ends with the test that started it, however that ends: its end closes our stdin.
        std::thread::spawn(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            std::process::exit(0);
        });
        let write = std::env::var_os(WRITE).is_some();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime
            .block_on(child_run(Path::new(&dir), keys, write))
            .expect("the node runs");
    }

    async fn child_run(dir: &Path, keys: u64, write: bool) -> Result<(), Error> {
        let kv = DurableKv::open(&dir.join("kv.redb"))?;
        println!("durable={}", kv.durable().map_or(0, |id| id.index));
        let node = start(dir, kv).await?;
        let handle = node.handle();
        let status = handle.status().await?;
        let mut wrong = 0;
        for i in 0..keys {
            let value = handle.read(move |kv: &DurableKv| kv.get(&format!("k{i}")));
            wrong += u64::from(value.await?? != Some(format!("v{i}").into_bytes()));
        }
        // Read where it leads: every entry of the log before its term is applied.
        let activity = handle.read(|kv: &DurableKv| kv.activity).await?;
        println!(
            "replayed={} target={} snapshot={} applies={} first_applied={} restores={} \
             checked={keys} wrong={wrong}",
            status.replay.entries,
            status.replay.target_index,
            status.raft.snapshot.index,
            activity.applies,
            activity.first_applied.unwrap_or(0),
            activity.restores,
        );
        if !write {
            node.shutdown().await;
            return Ok(());
        }
        for i in keys.. {
            if i == keys + SNAPSHOT_AFTER {
                println!("snapshot={}", handle.snapshot_now().await?);
            }
            let (key, value) = (format!("k{i}"), format!("v{i}"));
            let proposal = handle.propose_tracked(encode(PUT, &key, value.as_bytes()));
            let proposal = proposal.await?;
            let index = proposal.log_id().index;
            proposal.wait().await?;
            // What it reports synced once the write is acknowledged: the kill must not lose it.
            let durable = handle.read(|kv: &DurableKv| kv.durable().map_or(0, |id| id.index));
            println!("acked={i} index={index} durable={}", durable.await?);
        }
        Ok(())
    }

    /// A line's `name=value` fields (the test harness's own words around them have none).
    type Fields = BTreeMap<String, u64>;

    fn fields(line: &str) -> Fields {
        let pairs = line
            .split_whitespace()
            .filter_map(|word| word.split_once('='));
        let numbers = pairs.filter_map(|(name, value)| Some((name.into(), value.parse().ok()?)));
        numbers.collect()
    }

    /// How long a node process may stay silent before the test gives up on it.
    const SILENCE_MAX: Duration = Duration::from_secs(60);

    /// A `child` process, killed when dropped if it still runs.
    struct NodeProcess {
        process: Child,
        lines: mpsc::Receiver<String>,
    }

    impl NodeProcess {
        fn start(dir: &Path, keys: usize, write: bool) -> NodeProcess {
            let mut command = Command::new(std::env::current_exe().unwrap());
            command
                .args(["tests::child", "--exact", "--ignored", "--nocapture"])
                .env(DIR, dir)
                .env(KEYS, keys.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            if write {
                command.env(WRITE, "1");
            }
            let mut process = command.spawn().unwrap();
            let stdout = process.stdout.take().unwrap();
            // Read on a thread of its own, so that a silent process times out the test.
            let (sender, lines) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let _ = sender.send(line);
                }
            });
            NodeProcess { process, lines }
        }

        /// The next line with a field `name`, or `None` once the process's output ended.
        fn next_with(&self, name: &str) -> Option<Fields> {
            loop {
                match self.lines.recv_timeout(SILENCE_MAX) {
                    Ok(line) if fields(&line).contains_key(name) => return Some(fields(&line)),
                    Ok(_) => {}
                    Err(RecvTimeoutError::Disconnected) => return None,
                    Err(RecvTimeoutError::Timeout) => panic!("silent for {SILENCE_MAX:?}"),
                }
            }
        }

        fn expect(&self, name: &str) -> Fields {
            let fields = self.next_with(name);
            fields.unwrap_or_else(|| panic!("the node process ended before printing {name}"))
        }

        /// SIGKILL: no chance to sync anything. What it printed before.
        fn kill(mut self) -> Vec<Fields> {
            self.process.kill().unwrap();
            self.process.wait().unwrap();
            let lines = std::iter::from_fn(|| self.next_with("acked"));
            lines.collect()
        }

        /// Waits for its clean end.
        fn finish(mut self) {
            while self.next_with("").is_some() {}
            assert!(
                self.process.wait().unwrap().success(),
                "the node process failed"
            );
        }
    }

    impl Drop for NodeProcess {
        fn drop(&mut self) {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }

    /// The writes each writer acknowledges before it is killed.
    const WRITES_PER_LIFE: usize = 300;
    /// Writers killed at most, until one is killed with unsynced writes.
    const LIVES_MAX: usize = 4;

    /// A node process writes until it is killed with SIGKILL; a node restarted on its directory
    /// holds every acknowledged write, having applied again only the entries its database lost
    /// (its start skips keel's snapshot and the log the database held).
    #[test]
    fn a_node_killed_while_writing_applies_again_only_what_its_database_lost() {
        let dir = ScratchDir::new("kill");
        let mut acked = Acked::default();
        for life in 1..=LIVES_MAX {
            let writer = NodeProcess::start(&dir.0, acked.indexes.len(), true);
            let durable = writer.expect("durable")["durable"];
            let report = writer.expect("applies");
            let checked = acked.indexes.len() as u64;
            assert_eq!((report["checked"], report["wrong"]), (checked, 0));
            // A new database, or one closed cleanly by the check before (which synced it).
            assert_eq!(
                report["applies"], 0,
                "the writer started at {durable}: {report:?}"
            );
            let goal = acked.indexes.len() + WRITES_PER_LIFE;
            while acked.indexes.len() < goal {
                acked.record(&writer.expect("acked"));
            }
            for ack in writer.kill() {
                acked.record(&ack);
            }

            let checker = NodeProcess::start(&dir.0, acked.indexes.len(), false);
            let durable = checker.expect("durable")["durable"];
            let report = checker.expect("applies");
            checker.finish();
            let last_acked = *acked.indexes.last().unwrap();
            eprintln!(
                "life {life}: killed after {} acknowledged writes, the last at {last_acked}, \
                 durable() at {}; the database held {durable}; {report:?}",
                acked.indexes.len(),
                acked.durable
            );
            check_restart(durable, &report, &acked);
            if durable < last_acked {
                return;
            }
            // Killed right after a sync, which a kill can hit: once more.
        }
        panic!("{LIVES_MAX} kills each came right after a sync: no unsynced write was lost");
    }

    /// What the writers printed, across their lives.
    #[derive(Default)]
    struct Acked {
        /// The index of each acknowledged put, by key number.
        indexes: Vec<u64>,
        /// The last position `durable()` reported after one.
        durable: u64,
    }

    impl Acked {
        fn record(&mut self, ack: &Fields) {
            assert_eq!(
                ack["acked"],
                self.indexes.len() as u64,
                "acknowledged in order"
            );
            // Across lives too: a writer starts from what the clean stop before it synced.
            assert!(
                ack["durable"] >= self.durable,
                "durable() went back: {ack:?}"
            );
            self.indexes.push(ack["index"]);
            self.durable = ack["durable"];
        }
    }

    /// What a check after a kill printed, given the database held `durable` at its start.
    fn check_restart(durable: u64, report: &Fields, acked: &Acked) {
        let last_acked = *acked.indexes.last().unwrap();
        // `durable()` never ran ahead of the database: what it reported survived the kill.
        assert!(
            durable >= acked.durable,
            "durable() reported {} before the kill, the database held {durable} after it",
            acked.durable
        );
        // Writes are proposed one at a time: one may have been applied, not acknowledged.
        assert!(
            (1..=last_acked + 1).contains(&durable),
            "the database held {durable}, the last write acknowledged was at {last_acked}"
        );
        let lost = acked.indexes.iter().filter(|&&i| i > durable).count() as u64;
        assert!(lost < SYNC_EVERY_ENTRIES, "{lost} unsynced entries");
        assert_eq!(
            (report["checked"], report["wrong"]),
            (acked.indexes.len() as u64, 0),
            "every acknowledged write is there"
        );
        // keel had a snapshot, and did not restore it: it started from the database.
        assert!(report["snapshot"] > 0);
        assert_eq!(report["restores"], 0);
        // Its replay began after what the database held, not at the snapshot or the start.
        // (The snapshot is older than `durable`: taken 200 writes before the kill, and less
        // than `SYNC_EVERY_ENTRIES` writes go unsynced.)
        assert_eq!(report["replayed"], report["target"] - durable);
        // The state machine applied the writes it lost and the unacknowledged one, if it
        // reached the log; nothing it held (the check before this writer synced all it had).
        let applies = report["applies"];
        assert!((lost..=lost + 1).contains(&applies), "{applies} applied");
        assert!(applies == 0 || report["first_applied"] > durable);
    }
}
