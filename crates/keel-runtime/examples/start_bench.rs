//! Start-up benchmark (not a test): how long `Node::start` takes on a fresh data directory (a
//! cluster of one bootstrapped, its first segment created) and on the same directory again (a
//! restart), with every setting at its default, over `--rounds` rounds; prints each round and the
//! medians. The data directories go under `--dir` (default: the system temp dir), so the disk it
//! measures is the one a node would use.
//!
//! ```text
//! cargo run --release -p keel-runtime --example start_bench -- [--rounds 9] [--dir D]
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_core::LogId;
use keel_runtime::{Node, NodeConfig, SnapshotWriter, StateMachine};

/// Holds nothing: the benchmark measures keel, not the application.
struct Nothing;

impl StateMachine for Nothing {
    fn apply(&mut self, _at: LogId, _data: &Bytes) -> Result<Bytes, keel_runtime::ApplyError> {
        Ok(Bytes::new())
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        Box::new(Vec::new())
    }

    fn restore(
        &mut self,
        _last: LogId,
        _data: &mut dyn std::io::Read,
    ) -> Result<(), keel_runtime::RestoreError> {
        Ok(())
    }
}

fn argument(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = argument("--rounds").map_or(Ok(9), |r| r.parse())?;
    let base = argument("--dir").map_or_else(std::env::temp_dir, PathBuf::from);
    let base = base.join(format!("keel-start-bench-{}", std::process::id()));
    let (mut fresh, mut again) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        let dir = base.join(format!("round-{round}"));
        let mut config = NodeConfig::new(1, 1, &dir);
        config.initial_members = vec![1];
        let started = Instant::now();
        let node = Node::start(config.clone(), Nothing).await?;
        fresh.push(started.elapsed());
        node.shutdown().await;
        let started = Instant::now();
        let node = Node::start(config, Nothing).await?;
        again.push(started.elapsed());
        node.shutdown().await;
        println!(
            "round {round}: fresh start {:?}, restart {:?}",
            fresh[round], again[round]
        );
    }
    let _ = std::fs::remove_dir_all(&base);
    println!(
        "median of {}: fresh start {:?}, restart {:?}",
        fresh.len(),
        median(fresh),
        median(again)
    );
    Ok(())
}
