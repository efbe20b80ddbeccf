"""What job queues build on, with redis-py, between a leader and a follower, in RESP2 and RESP3:
`pubsub()` (a subscriber on one node, messages published on the other), `Lock` (its Lua scripts
loaded on the node they run on), pipelines with and without MULTI, and `transaction()` retrying
after another client changed a watched key.

    redis_py_primitives.py LEADER_PORT FOLLOWER_PORT

Prints `redis-py primitives ok` when every check passed; an assertion fails the program.
"""

import sys
import threading
import time

import redis


def clients(port, protocol):
    # The first request may race an election that just settled elsewhere: TRYAGAIN is retried.
    from redis.backoff import ConstantBackoff
    from redis.exceptions import TryAgainError
    from redis.retry import Retry

    return redis.Redis(
        port=port,
        protocol=protocol,
        retry=Retry(ConstantBackoff(0.2), 50),
        retry_on_error=[TryAgainError],
    )


def next_message(sub, deadline=10):
    end = time.time() + deadline
    while time.time() < end:
        message = sub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message is not None:
            return message
    raise AssertionError("no message")


def check_pubsub(publisher, subscriber, p):
    sub = subscriber.pubsub()
    sub.subscribe(p + "jobs")
    sub.psubscribe(p + "events:*")
    # Both confirmations: the subscriptions hold on the subscriber's node. PUBLISH answers the
    # receivers on the publisher's node (as Redis Cluster does), and reaches every node.
    for _ in range(2):
        assert sub.get_message(timeout=5)["type"] in ("subscribe", "psubscribe")
    same_node = publisher.connection_pool.connection_kwargs["port"] == (
        subscriber.connection_pool.connection_kwargs["port"]
    )
    assert publisher.publish(p + "jobs", "job-1") == (1 if same_node else 0)
    message = next_message(sub)
    assert (message["type"], message["channel"], message["data"]) == (
        "message",
        (p + "jobs").encode(),
        b"job-1",
    ), message
    publisher.publish(p + "events:done", "7")
    message = next_message(sub)
    assert message["type"] == "pmessage" and message["data"] == b"7", message
    assert message["pattern"] == (p + "events:*").encode(), message
    # A handler run by the pub/sub thread, as RQ's workers listen for commands (published until
    # heard: the subscription is confirmed to the thread, not here).
    sub.close()
    got = threading.Event()
    sub = subscriber.pubsub()
    sub.subscribe(**{p + "commands": lambda m: got.set()})
    thread = sub.run_in_thread(sleep_time=0.05, daemon=True)
    deadline = time.time() + 10
    while not got.wait(0.2):
        publisher.publish(p + "commands", "stop")
        assert time.time() < deadline, "the pub/sub thread's handler never ran"
    thread.stop()
    thread.join(5)
    sub.close()


def check_lock(first, second, p):
    lock = first.lock(p + "lock", timeout=10, blocking_timeout=5)
    assert lock.acquire()
    other = second.lock(p + "lock", timeout=10)
    assert not other.acquire(blocking=False), "a held lock was acquired again"
    assert lock.owned() and lock.locked()
    assert lock.extend(10)
    assert 10 < first.pttl(p + "lock") / 1000 <= 20
    lock.release()
    assert other.acquire(blocking=True, blocking_timeout=5)
    assert lock.locked() and not lock.owned() and other.owned()
    # A holder whose lock ran out and was taken meanwhile cannot release the new holder's.
    stale = first.lock(p + "lock", timeout=10)
    stale.local.token = b"a token of the past"
    try:
        stale.release()
        raise AssertionError("released a lock another client holds")
    except redis.exceptions.LockNotOwnedError:
        pass
    other.release()
    assert first.get(p + "lock") is None


def check_pipelines(r, other, p):
    with r.pipeline(transaction=False) as pipe:
        pipe.rpush(p + "q", "a", "b").lpop(p + "q").hset(p + "h", mapping={"x": "1"})
        pipe.hincrby(p + "h", "x", 2).zadd(p + "z", {"j1": 1.5}).zscore(p + "z", "j1")
        assert pipe.execute() == [2, b"a", 1, 3, 1, 1.5]
    with r.pipeline() as pipe:  # MULTI ... EXEC
        pipe.lmove(p + "q", p + "q2", "LEFT", "RIGHT").llen(p + "q2").expire(p + "q2", 100)
        assert pipe.execute() == [b"b", 1, True]
    assert 95 <= r.ttl(p + "q2") <= 100
    # transaction(): WATCH, read, MULTI, write; another client's change on the other node
    # between the read and EXEC makes redis-py run the function again.
    other.set(p + "counter", "10")
    attempts = []

    def increment(pipe):
        value = int(pipe.get(p + "counter"))
        attempts.append(value)
        if len(attempts) == 1:
            other.incr(p + "counter")
        pipe.multi()
        pipe.set(p + "counter", value + 1)

    r.transaction(increment, p + "counter")
    assert attempts == [10, 11], attempts
    assert other.get(p + "counter") == b"12"


def main():
    leader, follower = int(sys.argv[1]), int(sys.argv[2])
    for protocol in (2, 3):
        on_leader, on_follower = clients(leader, protocol), clients(follower, protocol)
        p = f"resp{protocol}:"
        check_pubsub(on_leader, on_follower, p + "a:")
        check_pubsub(on_follower, on_leader, p + "b:")
        check_lock(on_follower, on_leader, p)
        check_lock(on_leader, on_follower, p + "l:")
        check_pipelines(on_follower, on_leader, p + "f:")
        check_pipelines(on_leader, on_follower, p + "l:")
        on_leader.close()
        on_follower.close()
    print("redis-py primitives ok")


if __name__ == "__main__":
    main()
