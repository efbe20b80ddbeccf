//! A replicated counter: three nodes in one process, over loopback TCP.
//!
//! Each node binds port 0; a node started later is told the addresses of those before it, and
//! they learn its address from its handshake. Proposals and reads go to the leader. Run it with
//! `cargo run -p keel --example counter`.

use std::collections::BTreeMap;

use bytes::Bytes;
use keel::{
    ApplyError, ClientError, Handle, LogId, Node, NodeConfig, NodeId, RestoreError, SnapshotWriter,
    StateMachine,
};

/// Adds the little-endian u64 of each entry; answers the new total.
#[derive(Default)]
struct Counter(u64);

impl StateMachine for Counter {
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
        let Ok(add) = data[..].try_into().map(u64::from_le_bytes) else {
            // Refused alike on every node; the state is unchanged.
            return Err(ApplyError::Refused(Bytes::from_static(b"not a u64")));
        };
        self.0 += add;
        Ok(Bytes::copy_from_slice(&self.0.to_le_bytes()))
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(self.0.to_le_bytes().to_vec())
    }

    fn restore(&mut self, _last: LogId, data: &mut dyn std::io::Read) -> Result<(), RestoreError> {
        let mut bytes = [0u8; 8];
        data.read_exact(&mut bytes)
            .map_err(|e| RestoreError(e.to_string()))?;
        self.0 = u64::from_le_bytes(bytes);
        Ok(())
    }
}

type Handles = BTreeMap<NodeId, Handle<Counter>>;

/// Adds `n` at the leader: the new total.
async fn add(handles: &Handles, n: u64) -> Result<u64, ClientError> {
    let entry = Bytes::copy_from_slice(&n.to_le_bytes());
    loop {
        let leader = handles[&1].leader().await?;
        match handles[&leader].propose(entry.clone()).await {
            // Not applied: the leader changed before it took the entry. Ask again.
            Err(ClientError::NotLeader { .. }) => continue,
            result => return result.map(|total| u64::from_le_bytes(total[..].try_into().unwrap())),
        }
    }
}

async fn run(dir: &std::path::Path) -> Result<u64, Box<dyn std::error::Error>> {
    let mut nodes: BTreeMap<NodeId, Node<Counter>> = BTreeMap::new();
    for id in 1..=3 {
        let mut config = NodeConfig::new(id, 0x6b65656c, dir.join(format!("node-{id}")));
        config.initial_members = vec![1, 2, 3];
        config.peers = nodes.iter().map(|(&id, n)| (id, n.peer_addr())).collect();
        nodes.insert(id, Node::start(config, Counter::default()).await?);
    }
    let handles: Handles = nodes.iter().map(|(&id, n)| (id, n.handle())).collect();
    for n in 1..=10 {
        add(&handles, n).await?;
    }
    // A linearizable read, at the leader.
    let leader = handles[&1].leader().await?;
    let total = handles[&leader].read(|counter: &Counter| counter.0).await?;
    for node in nodes.into_values() {
        node.shutdown().await;
    }
    Ok(total)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("keel-counter-{}", std::process::id()));
    let total = run(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    println!("total: {}", total?);
    Ok(())
}

/// The counter under keel's simulator: a cluster of `Counter`s through crashes, partitions, lost
/// and duplicated messages, storage faults and membership changes, its clients' history checked
/// against the model below. `KEEL_SIM_SEEDS=1000 cargo test -p keel --example counter` runs more.
#[cfg(test)]
mod simulation {
    use std::fmt;

    use bytes::Bytes;
    use keel_sim::embed::{check, Model, Op, OpRng, Workload};

    use super::Counter;

    /// What a client asks: add `n`, or read the total.
    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    enum Ask {
        Add(u64),
        Read,
    }

    /// What it is told: the total after its operation.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Total(u64);

    impl fmt::Display for Ask {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{self:?}")
        }
    }

    impl fmt::Display for Total {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.0)
        }
    }

    /// The counter's sequential specification: what each operation returns after those before.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct CounterModel;

    impl Model for CounterModel {
        type State = u64;
        type Input = Ask;
        type Output = Total;

        fn init() -> u64 {
            0
        }

        fn step(total: &u64, ask: &Ask, told: &Total) -> Option<u64> {
            let after = match ask {
                Ask::Add(n) => total + n,
                Ask::Read => *total,
            };
            (after == told.0).then_some(after)
        }

        fn step_unobserved(total: &u64, ask: &Ask) -> Option<u64> {
            match ask {
                Ask::Add(n) => Some(total + n),
                Ask::Read => None,
            }
        }

        fn is_read_only(ask: &Ask, _told: Option<&Total>) -> bool {
            *ask == Ask::Read
        }

        // Hints that keep the check fast: the total only grows, so an operation told `t` can
        // no longer be placed once the total passed what it needs.
        fn may_still_return(total: &u64, ask: &Ask, told: &Total) -> bool {
            match ask {
                Ask::Add(n) => total + n <= told.0,
                Ask::Read => *total <= told.0,
            }
        }

        fn constrains(_ask: &Ask, _told: &Total) -> bool {
            true
        }

        fn is_monotone(_ask: &Ask) -> bool {
            true
        }
    }

    /// Clients that add 1 or read the total.
    struct Counting;

    impl Workload for Counting {
        type Machine = Counter;
        type Model = CounterModel;

        fn machine(&self) -> Counter {
            Counter::default()
        }

        fn next_op(&mut self, _client: usize, rng: &mut OpRng<'_>) -> Op<Ask> {
            let key = "total".to_string();
            if rng.chance(0.3) {
                return Op::Read {
                    key,
                    input: Ask::Read,
                };
            }
            // One at a time: timed-out adds of one size are interchangeable to the checker,
            // which keeps checking a history with many of them fast.
            let n = 1;
            Op::Write {
                key,
                input: Ask::Add(n),
                command: Bytes::copy_from_slice(&n.to_le_bytes()),
            }
        }

        fn write_output(_key: &str, _ask: &Ask, answer: Result<&Bytes, &Bytes>) -> Total {
            let total = answer.expect("the counter refuses only what is not a u64");
            Total(u64::from_le_bytes(total[..].try_into().expect("8 bytes")))
        }

        fn read(counter: &Counter, _key: &str, _ask: &Ask) -> Total {
            Total(counter.0)
        }
    }

    #[test]
    fn the_counter_is_linearizable_under_faults() {
        check(|| Counting);
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_nodes_count_to_55() {
        let dir = std::env::temp_dir().join(format!("keel-counter-test-{}", std::process::id()));
        let total = super::run(&dir).await;
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(total.expect("the example runs"), 55);
    }
}
