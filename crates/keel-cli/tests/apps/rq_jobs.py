"""RQ (python-rq) against keel: jobs enqueued through one node, run by RQ's own workers (separate
processes, `rq.Worker`, which forks a work horse per job) connected to another node; every
job's result read back through RQ.

    rq_jobs.py run --enqueue PORTS --work PORTS --protocol 2|3 --jobs N --workers W --dir DIR
                   [--pause-at K]
    rq_jobs.py worker --work PORTS --protocol 2|3 --dir DIR     (started by `run`)

PORTS is a comma-separated list: the node to use first, then the others to fail over to. Prints
`SUMMARY key=value ...` (see jobs_common.py); exits non-zero only if the program itself failed.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jobs_common  # noqa: E402
from rq import Queue, Worker  # noqa: E402
from redis.exceptions import RedisError  # noqa: E402
from rq.job import Job  # noqa: E402

QUEUE = "keel-jobs"


def square(i, log_dir):
    """The job: recorded, then its result."""
    jobs_common.record(log_dir, i)
    time.sleep(0.05)
    return i * i


def worker(args):
    connection = jobs_common.client(args.work, args.protocol)
    Worker([Queue(QUEUE, connection=connection)], connection=connection).work(
        logging_level="WARNING", with_scheduler=False
    )


def enqueue(queue, i, log_dir):
    """Enqueues job i under its own id; a failed attempt (outcome unknown) is retried."""
    for attempt in range(10):
        try:
            queue.enqueue("rq_jobs.square", i, log_dir, job_id=f"job-{i}", result_ttl=3600)
            return
        except RedisError as e:
            print(f"enqueue {i} attempt {attempt}: {e!r}", flush=True)
            time.sleep(0.5)
    raise RuntimeError(f"job {i} could not be enqueued")


def result_of(connection, i):
    try:
        job = Job.fetch(f"job-{i}", connection=connection)
    except Exception:  # noqa: BLE001: not there (yet)
        return None
    return job.return_value() if job.get_status() == "finished" else None


def run(args):
    started = time.time()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    me = os.path.abspath(__file__)
    ports = ",".join(map(str, args.work))
    argv = [sys.executable, me, "worker", "--work", ports, "--protocol", str(args.protocol)]
    argv += ["--dir", args.dir]
    connection = jobs_common.client(args.enqueue, args.protocol)
    queue = Queue(QUEUE, connection=connection)
    acknowledged, results = [], {}
    expected = {i: i * i for i in range(args.jobs)}
    with jobs_common.Workers([argv] * args.workers, env=env) as workers:
        for i in range(args.jobs):
            jobs_common.pause(args.pause_at, i, args.dir)
            enqueue(queue, i, args.dir)
            acknowledged.append(i)
        deadline = time.time() + args.wait
        while time.time() < deadline:
            for i in acknowledged:
                if results.get(i) is None:
                    results[i] = result_of(connection, i)
            if all(results.get(i) is not None for i in acknowledged):
                break
            workers.check_alive()
            time.sleep(0.2)
    statuses = {}
    for i in acknowledged:
        if results.get(i) is None:
            job = Job.fetch(f"job-{i}", connection=connection)
            statuses[i] = str(job.get_status())
    jobs_common.summary(
        "rq", acknowledged, results, expected, args.dir, started, unfinished_status=statuses
    )


def main():
    args = jobs_common.arguments(["run", "worker"])
    worker(args) if args.mode == "worker" else run(args)


if __name__ == "__main__":
    main()
