// What job queues build on, with ioredis (Node.js), between a leader and a follower: pub/sub (a
// subscriber on one node, messages published on the other, channels and patterns) and blocking
// pops that wait for a push made through the other node (BLPOP, BRPOPLPUSH, BLMOVE, BZPOPMIN),
// or time out with null.
//
//   node ioredis_primitives.js LEADER_PORT FOLLOWER_PORT
//
// Prints `ioredis primitives ok` when every check passed.
"use strict";

const assert = require("assert");
const Redis = require("ioredis");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function client(port) {
  // The first request may race an election that just settled elsewhere: TRYAGAIN resends.
  return new Redis({
    port,
    maxRetriesPerRequest: 20,
    reconnectOnError: (err) => (String(err.message).startsWith("TRYAGAIN") ? 2 : false),
  });
}

/// Resolves with the next `event` of `emitter` (its arguments), or rejects after 10 s.
function next(emitter, event) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${event} within 10 s`)), 10000);
    emitter.once(event, (...args) => {
      clearTimeout(timer);
      resolve(args);
    });
  });
}

async function pubsub(publisher, subscriber, p) {
  const sub = subscriber.duplicate();
  assert.strictEqual(await sub.subscribe(`${p}jobs`), 1);
  assert.strictEqual(await sub.psubscribe(`${p}events:*`), 2);
  const message = next(sub, "message");
  // PUBLISH answers this node's receivers (as Redis Cluster does), and reaches every node.
  await publisher.publish(`${p}jobs`, "job-1");
  assert.deepStrictEqual(await message, [`${p}jobs`, "job-1"]);
  const pmessage = next(sub, "pmessage");
  await publisher.publish(`${p}events:done`, "7");
  assert.deepStrictEqual(await pmessage, [`${p}events:*`, `${p}events:done`, "7"]);
  await sub.unsubscribe(`${p}jobs`);
  await sub.punsubscribe();
  sub.disconnect();
}

/// `pop` (a promise of a blocking pop) must still be waiting after 300 ms, then answer once
/// `push` ran; returns its answer.
async function waitsFor(pop, push) {
  let answered = false;
  const popped = pop.then((v) => {
    answered = true;
    return v;
  });
  await sleep(300);
  assert(!answered, "the blocking pop answered before the push");
  await push();
  return popped;
}

async function blockingPops(pusher, popperNode, p) {
  const popper = popperNode.duplicate();
  assert.deepStrictEqual(
    await waitsFor(popper.blpop(`${p}q`, 10), () => pusher.rpush(`${p}q`, "j1")),
    [`${p}q`, "j1"],
  );
  assert.strictEqual(
    await waitsFor(popper.brpoplpush(`${p}q`, `${p}processing`, 10), () =>
      pusher.lpush(`${p}q`, "j2"),
    ),
    "j2",
  );
  assert.deepStrictEqual(await pusher.lrange(`${p}processing`, 0, -1), ["j2"]);
  assert.strictEqual(
    await waitsFor(popper.blmove(`${p}q`, `${p}processing`, "LEFT", "RIGHT", 10), () =>
      pusher.rpush(`${p}q`, "j3"),
    ),
    "j3",
  );
  assert.deepStrictEqual(
    await waitsFor(popper.bzpopmin(`${p}z`, 10), () =>
      pusher.zadd(`${p}z`, 5, "later", 1, "first"),
    ),
    [`${p}z`, "first", "1"],
  );
  // Nothing pushed: null once the timeout passes, not before.
  const started = Date.now();
  assert.strictEqual(await popper.blpop(`${p}empty`, 0.5), null);
  assert(Date.now() - started >= 450, `BLPOP timed out after ${Date.now() - started} ms`);
  popper.disconnect();
}

(async () => {
  const leader = client(Number(process.argv[2]));
  const follower = client(Number(process.argv[3]));
  await pubsub(leader, follower, "a:");
  await pubsub(follower, leader, "b:");
  await blockingPops(leader, follower, "f:");
  await blockingPops(follower, leader, "l:");
  leader.disconnect();
  follower.disconnect();
  console.log("ioredis primitives ok");
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
