"""What the Python job-queue programs (rq_jobs.py, celery_jobs.py) share.

- `client(ports, protocol)`: a redis-py client whose connections go to the first of `ports` that
  accepts (keel has no Sentinel: this small wrapper is how a client of a killed node reaches a
  surviving one), and that retries a command on a lost connection and on keel's `TRYAGAIN` (no
  leader yet, or outcome unknown) with redis-py's own Retry.
- `record(log_dir, job)`: a job's execution, one line in a file of the executing process: the test
  counts executions there, apart from the queue's own bookkeeping.
- `summary(...)`: the line the test reads (`SUMMARY key=value ...`: jobs acknowledged, done,
  lost, duplicated), after a `DETAIL {json}` line naming the jobs.
- `pause(...)`: the point mid-run where the test may kill the leader (it answers on stdin).
- `Workers`: worker processes, stopped when the program ends however it ends.
"""

import argparse
import collections
import glob
import json
import os
import signal
import subprocess
import sys
import time

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError, TryAgainError
from redis.retry import Retry


class FailoverConnection(redis.connection.Connection):
    """A connection to the first of `ports` that accepts it, tried in order."""

    def __init__(self, ports=(), **kwargs):
        self.ports = [int(p) for p in ports]
        super().__init__(port=self.ports[0], **kwargs)

    def _connect(self):
        error = None
        for port in self.ports:
            self.port = port
            try:
                return super()._connect()
            except OSError as e:
                error = e
        raise error


def retry():
    """About 30 s of retries: longer than an election."""
    return Retry(ExponentialBackoff(cap=1.0, base=0.05), 40)


RETRY_ON = [ConnectionError, TimeoutError, TryAgainError]


def pool_kwargs(ports, protocol):
    return dict(
        connection_class=FailoverConnection,
        ports=ports,
        protocol=protocol,
        retry=retry(),
        retry_on_error=list(RETRY_ON),
        socket_connect_timeout=2,
        health_check_interval=0,
    )


def client(ports, protocol, **kwargs):
    pool = redis.ConnectionPool(**pool_kwargs(ports, protocol), **kwargs)
    return redis.Redis(connection_pool=pool)


def ports_arg(text):
    return [int(p) for p in text.split(",")]


def arguments(modes):
    """The programs' command line (see rq_jobs.py)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=modes)
    parser.add_argument("--enqueue", type=ports_arg)
    parser.add_argument("--work", type=ports_arg, required=True)
    parser.add_argument("--protocol", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--pause-at", type=int)
    parser.add_argument("--wait", type=float, default=60)
    return parser.parse_args()


def record(log_dir, job):
    with open(os.path.join(log_dir, f"executions-{os.getpid()}.log"), "a") as f:
        f.write(f"{job}\n")


def executions(log_dir):
    counts = collections.Counter()
    for path in glob.glob(os.path.join(log_dir, "executions-*.log")):
        with open(path) as f:
            counts.update(line.strip() for line in f if line.strip())
    return counts


def pause(at, done, log_dir):
    """At `done == at`, once the workers are busy (a few jobs ran), tells the test (stdout) how
    many executions there were so far, and waits for its answer (stdin)."""
    if at is not None and done == at:
        deadline = time.time() + 60
        while sum(executions(log_dir).values()) < 5 and time.time() < deadline:
            time.sleep(0.05)
        print(f"PAUSE executed={sum(executions(log_dir).values())}", flush=True)
        answer = sys.stdin.readline().strip()
        print(f"resumed: {answer}", flush=True)


def summary(library, acknowledged, results, expected, log_dir, started, **extra):
    """Prints the summary line; `results` maps job -> result (or None), `expected` job -> result."""
    counts = executions(log_dir)
    done = sorted(j for j in acknowledged if results.get(j) is not None)
    wrong = sorted(j for j in done if results[j] != expected[j])
    lost = sorted(j for j in acknowledged if results.get(j) is None)
    never_run = sorted(j for j in acknowledged if counts[str(j)] == 0)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    line = dict(
        library=library,
        acknowledged=len(acknowledged),
        done=len(done),
        wrong=wrong,
        lost=lost,
        never_run=never_run,
        executions=sum(counts.values()),
        duplicates=duplicates,
        duplicated=sorted(int(j) for j, n in counts.items() if n > 1),
        seconds=round(time.time() - started, 1),
        **extra,
    )
    counted = ("acknowledged", "done", "executions", "duplicates", "seconds")
    numbers = {k: line[k] for k in counted}
    numbers.update({k: len(line[k]) for k in ("wrong", "lost", "never_run")})
    print("DETAIL " + json.dumps(line), flush=True)
    pairs = " ".join(f"{k}={v}" for k, v in numbers.items())
    print(f"SUMMARY library={library} {pairs}", flush=True)


class Workers:
    """Worker processes (`argv` lists); stopped with SIGTERM, then SIGKILL, when the block ends."""

    def __init__(self, argvs, env=None):
        self.argvs = argvs
        self.env = env
        self.procs = []

    def __enter__(self):
        for argv in self.argvs:
            self.procs.append(subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL))
        return self

    def check_alive(self):
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"worker {p.args} exited with {p.returncode}")

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return False
