"""Celery against keel, with its Redis broker (kombu's redis transport) and its Redis result
backend: tasks sent through one node, run by Celery's own workers (`celery worker`, prefork
pool, separate processes) connected to another node; every result read back with
`AsyncResult.get()` (which waits on the backend's pub/sub).

    celery_jobs.py run --enqueue PORTS --work PORTS --protocol 2|3 --jobs N --workers W --dir DIR
                       [--pause-at K]

PORTS is a comma-separated list: the node to use first, then the others to fail over to. The
broker and the backend connect with jobs_common's FailoverConnection (kombu and Celery take their
redis-py connection parameters from their own options, which have neither a list of hosts to fail
over to nor RESP3: the two small subclasses below pass them). Workers read their ports, protocol
and log directory from the environment (KEEL_JOBS_PORTS, KEEL_JOBS_PROTOCOL, KEEL_JOBS_DIR).
Prints `SUMMARY key=value ...` (see jobs_common.py).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jobs_common  # noqa: E402
import celery.exceptions  # noqa: E402
import kombu.transport  # noqa: E402
import redis  # noqa: E402
from celery import Celery  # noqa: E402
from celery.backends.redis import RedisBackend  # noqa: E402
from kombu.transport import redis as kombu_redis  # noqa: E402

QUEUE = "keel-jobs"


def settings():
    ports = jobs_common.ports_arg(os.environ.get("KEEL_JOBS_PORTS", "6379"))
    return ports, int(os.environ.get("KEEL_JOBS_PROTOCOL", "2"))


class FailoverChannel(kombu_redis.Channel):
    """kombu's Redis channel, its connections made by FailoverConnection."""

    connection_class = jobs_common.FailoverConnection

    def _get_pool(self, asynchronous=False):
        params = self._connparams(asynchronous=asynchronous)
        self.keyprefix_fanout = self.keyprefix_fanout.format(db=params["db"])
        for key in ("host", "port", "retry_on_timeout"):
            params.pop(key, None)
        ports, protocol = settings()
        params.update(
            ports=ports,
            protocol=protocol,
            retry=jobs_common.retry(),
            retry_on_error=list(jobs_common.RETRY_ON),
        )
        return redis.ConnectionPool(**params)


class FailoverTransport(kombu_redis.Transport):
    Channel = FailoverChannel


kombu.transport.TRANSPORT_ALIASES["keel-failover"] = f"{__name__}:FailoverTransport"


class FailoverBackend(RedisBackend):
    """Celery's Redis result backend, its connections made by FailoverConnection."""

    def _get_pool(self, **params):
        ports, protocol = settings()
        return redis.ConnectionPool(**jobs_common.pool_kwargs(ports, protocol))


app = Celery("keel_jobs", broker="keel-failover://127.0.0.1//", backend=FailoverBackend)
app.conf.update(
    task_default_queue=QUEUE,
    result_expires=3600,
    broker_connection_retry_on_startup=True,
    # A message a worker took but did not acknowledge (prefetched when its connection broke) is
    # delivered again after `visibility_timeout` (an hour by default), looked for every second:
    # Celery's at-least-once.
    broker_transport_options={
        "visibility_timeout": 5,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
    # The run with the leader killed turns off what listens on kombu's pub/sub (remote control,
    # gossip): see run().
    worker_enable_remote_control=os.environ.get("KEEL_JOBS_REMOTE_CONTROL", "1") == "1",
    result_backend_always_retry=True,
    result_backend_max_retries=20,
    worker_hijack_root_logger=False,
)


@app.task(name="keel.square")
def square(i, log_dir):
    jobs_common.record(log_dir, i)
    time.sleep(0.05)
    return i * i


def send(i, log_dir):
    """Sends task i under its own id; a failed attempt (outcome unknown) is retried."""
    for attempt in range(10):
        try:
            return square.apply_async((i, log_dir), task_id=f"job-{i}")
        except Exception as e:  # noqa: BLE001: kombu and Celery wrap redis-py's errors
            print(f"send {i} attempt {attempt}: {e!r}", flush=True)
            time.sleep(0.5)
    raise RuntimeError(f"task {i} could not be sent")


def wait_results(sent, workers, wait):
    """Each task's result through AsyncResult.get() (which waits on the backend's pub/sub), the
    tasks still pending polled in turn; None for those that did not finish."""
    results = {}
    deadline = time.time() + wait
    while time.time() < deadline and len(results) < len(sent):
        for i, handle in sent.items():
            if i in results:
                continue
            workers.check_alive()
            try:
                results[i] = handle.get(timeout=0.5)
            except Exception as e:  # noqa: BLE001: not yet, or a lost connection: again
                if not isinstance(e, celery.exceptions.TimeoutError):
                    print(f"result {i}: {e!r}", flush=True)
    return results


def run(args):
    started = time.time()
    me = os.path.dirname(os.path.abspath(__file__))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(sys.path),
        KEEL_JOBS_PORTS=",".join(map(str, args.work)),
        KEEL_JOBS_PROTOCOL=str(args.protocol),
    )
    os.environ["KEEL_JOBS_PORTS"] = ",".join(map(str, args.enqueue))
    os.environ["KEEL_JOBS_PROTOCOL"] = str(args.protocol)
    argv = [sys.executable, "-m", "celery", "--workdir", me, "-A", "celery_jobs", "worker"]
    argv += ["--pool", "prefork", "--concurrency", "2", "-Q", QUEUE, "--loglevel", "WARNING"]
    if args.pause_at is not None:
        # After the leader was killed, a worker's consumer sometimes (6 runs of 14, RESP2 and
        # RESP3 alike) blocked for ever reading its reconnected fanout (pub/sub) connection to a
        # surviving node, which had not subscribed again (CLIENT LIST: sub=0, psub=0, last
        # command CLIENT SETINFO): without remote control and gossip a worker has no such
        # connection (docs/redis.md, "Job queues and client libraries").
        env["KEEL_JOBS_REMOTE_CONTROL"] = "0"
        argv += ["--without-gossip", "--without-mingle"]
    argvs = [argv + ["--hostname", f"w{n}@%h"] for n in range(args.workers)]
    expected = {i: i * i for i in range(args.jobs)}
    sent = {}
    with jobs_common.Workers(argvs, env=env) as workers:
        for i in range(args.jobs):
            jobs_common.pause(args.pause_at, i, args.dir)
            sent[i] = send(i, args.dir)
        results = wait_results(sent, workers, args.wait)
    states = {i: h.state for i, h in sent.items() if results.get(i) is None}
    jobs_common.summary(
        "celery", list(sent), results, expected, args.dir, started, unfinished_state=states
    )


def main():
    run(jobs_common.arguments(["run"]))


if __name__ == "__main__":
    main()
