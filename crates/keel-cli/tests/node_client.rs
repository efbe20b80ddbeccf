//! A client of another language from its own registry: ioredis (Node.js, from npm) against a
//! follower of a three-node cluster of `keel serve` processes, running its common operations:
//! strings, counters, a pipeline, MULTI/EXEC, expiry, a lock with SET NX PX released under
//! WATCH. Needs `node` and `npm` (scripts/test installs the Debian packages nodejs and npm);
//! ioredis is installed from npm into a temporary directory.

mod process;

use process::{Cluster, TempDir};

/// ioredis's major version: its API for what the script uses is stable across it.
const IOREDIS: &str = "ioredis@5";

const SCRIPT: &str = r#"
const Redis = require("ioredis");
const assert = require("assert");
const port = Number(process.argv[2]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

(async () => {
  const r = new Redis({ port, maxRetriesPerRequest: 3 });
  // The first request may race an election that just settled elsewhere: retry TRYAGAIN.
  for (let attempt = 0; ; attempt++) {
    try {
      await r.set("node:ready", "1");
      break;
    } catch (e) {
      assert(String(e).includes("TRYAGAIN") && attempt < 50, String(e));
      await sleep(200);
    }
  }
  assert.strictEqual(await r.set("node:s", "hello"), "OK");
  assert.strictEqual(await r.get("node:s"), "hello");
  assert.strictEqual(await r.append("node:s", " world"), 11);
  assert.strictEqual(await r.incrby("node:n", 5), 5);
  assert.strictEqual(await r.incrbyfloat("node:f", "1.5"), "1.5");
  await r.mset("node:a", "1", "node:b", "2");
  assert.deepStrictEqual(await r.mget("node:a", "node:b", "node:none"), ["1", "2", null]);
  assert.strictEqual(await r.exists("node:a", "node:none"), 1);

  // A pipeline, and a MULTI/EXEC transaction.
  const piped = await r.pipeline().set("node:p", "1").incr("node:p").get("node:p").exec();
  assert.deepStrictEqual(piped.map(([err, v]) => v), ["OK", 2, "2"]);
  const tx = await r.multi().incr("node:p").get("node:p").exec();
  assert.deepStrictEqual(tx.map(([err, v]) => v), [3, "3"]);

  // Expiry.
  assert.strictEqual(await r.set("node:e", "v", "EX", 100), "OK");
  const ttl = await r.ttl("node:e");
  assert(ttl > 95 && ttl <= 100, "TTL " + ttl);
  assert.strictEqual(await r.persist("node:e"), 1);
  assert.strictEqual(await r.ttl("node:e"), -1);
  assert.strictEqual(await r.set("node:short", "v", "PX", 200), "OK");
  await sleep(600);
  assert.strictEqual(await r.get("node:short"), null);

  // A lock: SET NX PX, another holder refused, released by its holder under WATCH.
  assert.strictEqual(await r.set("node:lock", "me", "PX", 30000, "NX"), "OK");
  assert.strictEqual(await r.set("node:lock", "you", "PX", 30000, "NX"), null);
  await r.watch("node:lock");
  assert.strictEqual(await r.get("node:lock"), "me");
  const released = await r.multi().del("node:lock").exec();
  assert.deepStrictEqual(released, [[null, 1]]);
  // WATCH aborts when another client changes the key: EXEC answers null.
  await r.set("node:w", "1");
  await r.watch("node:w");
  const other = new Redis({ port });
  await other.set("node:w", "2");
  assert.strictEqual(await r.multi().set("node:w", "3").exec(), null);
  assert.strictEqual(await r.get("node:w"), "2");
  other.disconnect();
  r.disconnect();
  console.log("ioredis ok");
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
"#;

fn run(program: &str, args: &[&str], dir: &std::path::Path) -> String {
    process::run_program(program, args, Some(dir)).0
}

#[test]
fn ioredis_common_operations_against_a_follower() {
    let dir = TempDir::new("ioredis");
    run(
        "npm",
        &[
            "install",
            "--silent",
            "--no-audit",
            "--no-fund",
            "--no-save",
            IOREDIS,
        ],
        dir.path(),
    );
    let script = dir.path().join("client.js");
    std::fs::write(&script, SCRIPT).expect("write the script");

    let cluster = Cluster::new("ioredis", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let port = cluster.node(follower).client_port.to_string();
    let stdout = run(
        "node",
        &[script.to_str().expect("a UTF-8 path"), &port],
        dir.path(),
    );
    assert!(stdout.contains("ioredis ok"), "{stdout}");
    assert_eq!(
        process::get(cluster.node(leader), "node:w").as_deref(),
        Some("2")
    );
}
