// BullMQ against keel: jobs added through one node, processed by BullMQ's own Worker (in separate
// Node.js processes, this file in `worker` mode) connected to another node; every job's return
// value read back through BullMQ (Job.fromId).
//
//   node bullmq_jobs.js run --enqueue PORTS --work PORTS --jobs N --workers W --dir DIR
//                           [--pause-at K]
//
// PORTS is a comma-separated list: the node to use first, then the others to fail over to.
// ioredis (BullMQ's client; RESP2 only) has no list of hosts to fail over to outside Sentinel:
// FailoverConnector, through its `Connector` option, connects to the next port on each
// (re)connection. keel's `-TRYAGAIN` (no leader yet, outcome unknown) reconnects and resends the
// command through ioredis's own `reconnectOnError`. Prints `DETAIL {json}` and
// `SUMMARY key=value ...` like the Python programs (jobs_common.py).
"use strict";

const fs = require("fs");
const path = require("path");
const readline = require("readline");
const { fork } = require("child_process");
const { Queue, Worker, Job } = require("bullmq");
const StandaloneConnector = require("ioredis/built/connectors/StandaloneConnector").default;

const QUEUE = "keel-jobs";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class FailoverConnector extends StandaloneConnector {
  constructor(options) {
    super({ ...options });
    this.ports = options.failoverPorts;
    this.next = 0;
  }

  connect(callback) {
    this.options.port = this.ports[this.next % this.ports.length];
    this.next += 1;
    return super.connect(callback);
  }
}

function connection(ports) {
  return {
    host: "127.0.0.1",
    port: ports[0],
    failoverPorts: ports,
    Connector: FailoverConnector,
    maxRetriesPerRequest: null,
    retryStrategy: (times) => Math.min(times * 100, 1000),
    reconnectOnError: (err) => (String(err.message).startsWith("TRYAGAIN") ? 2 : false),
  };
}

function parse(argv) {
  const args = { mode: argv[0], jobs: 100, workers: 2, wait: 60, pauseAt: null };
  for (let k = 1; k < argv.length; k += 2) {
    const [name, value] = [argv[k], argv[k + 1]];
    if (name === "--enqueue") args.enqueue = value.split(",").map(Number);
    else if (name === "--work") args.work = value.split(",").map(Number);
    else if (name === "--jobs") args.jobs = Number(value);
    else if (name === "--workers") args.workers = Number(value);
    else if (name === "--dir") args.dir = value;
    else if (name === "--pause-at") args.pauseAt = Number(value);
    else if (name === "--wait") args.wait = Number(value);
    else throw new Error(`unknown argument ${name}`);
  }
  return args;
}

async function worker(args) {
  const log = path.join(args.dir, `executions-${process.pid}.log`);
  const w = new Worker(
    QUEUE,
    async (job) => {
      fs.appendFileSync(log, `${job.data.i}\n`);
      await sleep(50);
      return job.data.i * job.data.i;
    },
    // A job whose fetch answered while its connection broke is not this worker's: its lock
    // runs out and the stalled-jobs check puts it back to wait. Both are 30 s by default.
    {
      connection: connection(args.work),
      concurrency: 4,
      lockDuration: 10000,
      stalledInterval: 5000,
    },
  );
  w.on("error", (e) => console.error(`worker ${process.pid}: ${e}`));
  w.on("stalled", (id) => console.error(`worker ${process.pid}: ${id} stalled, back to wait`));
  process.on("SIGTERM", async () => {
    await w.close();
    process.exit(0);
  });
}

function executions(dir) {
  const counts = new Map();
  for (const name of fs.readdirSync(dir).filter((n) => n.startsWith("executions-"))) {
    for (const line of fs.readFileSync(path.join(dir, name), "utf8").split("\n")) {
      if (line.trim()) counts.set(line.trim(), (counts.get(line.trim()) || 0) + 1);
    }
  }
  return counts;
}

async function pause(at, done, lines, dir) {
  if (at === null || done !== at) return;
  // Once the workers are busy (a few jobs ran).
  const executed = () => [...executions(dir).values()].reduce((a, b) => a + b, 0);
  for (const deadline = Date.now() + 60000; executed() < 5 && Date.now() < deadline; ) {
    await sleep(50);
  }
  console.log(`PAUSE executed=${executed()}`);
  const answer = await lines.next();
  console.log(`resumed: ${answer.value}`);
}

async function add(queue, i) {
  for (let attempt = 0; attempt < 10; attempt++) {
    try {
      await queue.add("square", { i }, { jobId: `job-${i}`, removeOnComplete: false });
      return;
    } catch (e) {
      console.log(`add ${i} attempt ${attempt}: ${e}`);
      await sleep(500);
    }
  }
  throw new Error(`job ${i} could not be added`);
}

async function results(queue, acknowledged, workers, wait) {
  const got = new Map();
  const deadline = Date.now() + wait * 1000;
  while (Date.now() < deadline && got.size < acknowledged.length) {
    for (const i of acknowledged.filter((i) => !got.has(i))) {
      try {
        const job = await Job.fromId(queue, `job-${i}`);
        if (job && job.finishedOn && job.returnvalue !== null && job.returnvalue !== undefined) {
          got.set(i, job.returnvalue);
        }
      } catch (e) {
        console.log(`result ${i}: ${e}`);
      }
    }
    for (const w of workers) {
      if (w.exitCode !== null) throw new Error(`worker ${w.pid} exited with ${w.exitCode}`);
    }
    await sleep(200);
  }
  return got;
}

async function run(args) {
  const started = Date.now();
  const workers = [];
  const stop = () => workers.forEach((w) => w.exitCode === null && w.kill("SIGKILL"));
  process.on("exit", stop);
  const workArgs = ["worker", "--work", args.work.join(","), "--dir", args.dir];
  for (let n = 0; n < args.workers; n++) workers.push(fork(__filename, workArgs));
  const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const queue = new Queue(QUEUE, { connection: connection(args.enqueue) });
  queue.on("error", (e) => console.log(`queue: ${e}`));
  const acknowledged = [];
  for (let i = 0; i < args.jobs; i++) {
    await pause(args.pauseAt, i, lines, args.dir);
    await add(queue, i);
    acknowledged.push(i);
  }
  const got = await results(queue, acknowledged, workers, args.wait);
  const states = {};
  for (const i of acknowledged.filter((i) => !got.has(i))) {
    states[i] = await queue.getJobState(`job-${i}`);
  }
  for (const w of workers) w.kill("SIGTERM");
  const exited = (w) => new Promise((r) => (w.exitCode !== null ? r() : w.on("exit", r)));
  await Promise.all(workers.map(exited));
  const counts = executions(args.dir);
  const duplicated = [...counts].filter(([, n]) => n > 1).map(([j]) => Number(j));
  const detail = {
    library: "bullmq",
    acknowledged: acknowledged.length,
    done: got.size,
    wrong: acknowledged.filter((i) => got.has(i) && got.get(i) !== i * i),
    lost: acknowledged.filter((i) => !got.has(i)),
    never_run: acknowledged.filter((i) => !counts.has(String(i))),
    executions: [...counts.values()].reduce((a, b) => a + b, 0),
    duplicates: [...counts.values()].reduce((a, n) => a + n - 1, 0),
    duplicated: duplicated.sort((a, b) => a - b),
    seconds: Math.round((Date.now() - started) / 100) / 10,
    unfinished_state: states,
  };
  console.log("DETAIL " + JSON.stringify(detail));
  const numbers = ["acknowledged", "done", "executions", "duplicates", "seconds"].map(
    (k) => `${k}=${detail[k]}`,
  );
  numbers.push(...["wrong", "lost", "never_run"].map((k) => `${k}=${detail[k].length}`));
  console.log(`SUMMARY library=bullmq ${numbers.join(" ")}`);
  await queue.close();
  process.exit(0);
}

const args = parse(process.argv.slice(2));
(args.mode === "worker" ? worker(args) : run(args)).catch((e) => {
  console.error(e);
  process.exit(1);
});
