//! Redis pub/sub across a 3-node cluster, carried as node messages (never through the log): a
//! subscriber on every node receives what is published on a follower and on the leader, in order
//! per publishing connection, by channel and by pattern, in RESP2 and as RESP3 pushes; PUBSUB
//! answers about each node's own subscribers; a subscriber that stops reading is disconnected;
//! redis-py's `pubsub()` works against a follower. Keyspace notifications: a follower's
//! subscriber hears the events of the writes made through the leader (expiry included), once,
//! and a restarted node does not fire again the events of the entries it replays. PUBLISH inside
//! MULTI ... EXEC and from a script is delivered once, to every node's subscribers, when the
//! transaction or script applies.

mod process;

use keel_resp::Reply;
use process::{eventually, info_field, raw_request, run_program, Cluster, Raw};

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

fn message(marker: char, channel: &str, payload: &str) -> String {
    format!(
        "{marker}3\r\n$7\r\nmessage\r\n{}{}",
        bulk(channel),
        bulk(payload)
    )
}

fn pmessage(pattern: &str, channel: &str, payload: &str) -> String {
    let head = format!("*4\r\n$8\r\npmessage\r\n{}", bulk(pattern));
    format!("{head}{}{}", bulk(channel), bulk(payload))
}

fn integer(reply: Reply) -> i64 {
    match reply {
        Reply::Integer(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn three_nodes(name: &str, extra: &[&str]) -> (Cluster, u64, Vec<u64>) {
    let cluster = Cluster::new(name, &[1, 2, 3], &[], extra);
    let leader = cluster.leader();
    let followers = [1, 2, 3].into_iter().filter(|&id| id != leader).collect();
    (cluster, leader, followers)
}

/// On node `port`: a RESP2 subscriber to a channel and a pattern, a RESP3 one to the channel.
fn subscribers_on(port: u16) -> (Raw, Raw) {
    let mut two = Raw::connect(port);
    let sub = two.request_args(&["SUBSCRIBE", "news"]);
    assert_eq!(sub, "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n");
    let psub = two.request_args(&["PSUBSCRIBE", "n*"]);
    assert_eq!(psub, "*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:2\r\n");
    let mut three = Raw::connect(port);
    three.request_args(&["HELLO", "3"]);
    let sub = three.request_args(&["SUBSCRIBE", "news"]);
    assert_eq!(sub, ">3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n");
    (two, three)
}

/// PUBSUB on node `port` answers about that node's own subscribers.
fn introspection_on(port: u16) {
    let numsub = raw_request(port, &["PUBSUB", "NUMSUB", "news", "none"]).unwrap();
    let want = [
        Reply::bulk("news"),
        Reply::Integer(2),
        Reply::bulk("none"),
        Reply::Integer(0),
    ];
    assert_eq!(numsub, Reply::Array(want.to_vec()));
    let numpat = raw_request(port, &["PUBSUB", "NUMPAT"]).unwrap();
    assert_eq!(integer(numpat), 1);
    let channels = raw_request(port, &["PUBSUB", "CHANNELS", "n*"]).unwrap();
    assert_eq!(channels, Reply::Array(vec![Reply::bulk("news")]));
    assert_eq!(info_field(port, "stats", "pubsub_channels"), 1);
    assert_eq!(info_field(port, "stats", "pubsub_patterns"), 1);
}

/// The next message `client` reads: `f<n>` or `l<n>`, the next of its publisher (each
/// publisher's messages in order); the counts so far.
fn next_in_order(got: &str, counts: &mut [u32; 2]) -> String {
    let from_follower = format!("f{}", counts[0]);
    if got.contains(&format!("{from_follower}\r\n")) {
        counts[0] += 1;
        return from_follower;
    }
    let from_leader = format!("l{}", counts[1]);
    assert!(
        got.contains(&format!("{from_leader}\r\n")),
        "out of order: {got:?}"
    );
    counts[1] += 1;
    from_leader
}

/// RESP2's subscribed mode: PING answers the pub/sub way, other commands are refused.
fn subscribed_mode(two: &mut Raw) {
    assert_eq!(
        two.request_args(&["PING"]),
        "*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    );
    assert_eq!(
        two.request_args(&["GET", "k"]),
        "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET \
         are allowed in this context\r\n"
    );
    let unsub = two.request_args(&["UNSUBSCRIBE"]);
    assert_eq!(unsub, "*3\r\n$11\r\nunsubscribe\r\n$4\r\nnews\r\n:1\r\n");
    let punsub = two.request_args(&["PUNSUBSCRIBE"]);
    assert_eq!(punsub, "*3\r\n$12\r\npunsubscribe\r\n$2\r\nn*\r\n:0\r\n");
    assert_eq!(two.request_args(&["PING"]), "+PONG\r\n");
}

#[test]
fn messages_published_on_any_node_reach_every_nodes_subscribers_in_order() {
    let (cluster, leader, followers) = three_nodes("pubsub-order", &[]);
    let port = |id: u64| cluster.node(id).client_port;
    let mut subscribers: Vec<(Raw, Raw)> = [1, 2, 3]
        .iter()
        .map(|&id| subscribers_on(port(id)))
        .collect();
    [1, 2, 3].iter().for_each(|&id| introspection_on(port(id)));
    // One connection publishes on a follower, another on the leader, interleaved.
    let mut on_follower = Raw::connect(port(followers[0]));
    let mut on_leader = Raw::connect(port(leader));
    for i in 0..50 {
        // Three receivers on the publishing node: channel + pattern (RESP2), channel (RESP3).
        let published = on_follower.request_args(&["PUBLISH", "news", &format!("f{i}")]);
        assert_eq!(published, ":3\r\n");
        let published = on_leader.request_args(&["PUBLISH", "news", &format!("l{i}")]);
        assert_eq!(published, ":3\r\n");
    }
    for (two, three) in &mut subscribers {
        let mut counts = [0, 0];
        for _ in 0..100 {
            let got = three.read_one("a pushed message");
            let payload = next_in_order(&got, &mut counts);
            assert_eq!(got, message('>', "news", &payload));
        }
        let mut counts = [0, 0];
        for _ in 0..100 {
            let got = two.read_one("a pushed message");
            let payload = next_in_order(&got, &mut counts);
            assert_eq!(got, message('*', "news", &payload));
            assert_eq!(
                two.read_one("a pushed message"),
                pmessage("n*", "news", &payload)
            );
        }
    }
    subscribed_mode(&mut subscribers[0].0);
    // Shard channels: their own namespace, across the cluster too.
    let (_, three) = &mut subscribers[2];
    three.request_args(&["SSUBSCRIBE", "orders"]);
    let here = if followers[0] == 3 {
        ":1\r\n"
    } else {
        ":0\r\n"
    };
    assert_eq!(
        on_follower.request_args(&["SPUBLISH", "orders", "o1"]),
        here
    );
    let smessage = ">3\r\n$8\r\nsmessage\r\n$6\r\norders\r\n$2\r\no1\r\n";
    assert_eq!(three.read_one("a pushed message"), smessage);
}

/// A subscriber on node `port` to every keyspace and keyevent channel, with `flags` set there.
fn keyspace_subscriber(port: u16, flags: &str) -> Raw {
    let set = raw_request(port, &["CONFIG", "SET", "notify-keyspace-events", flags]);
    assert_eq!(set.unwrap(), Reply::OK);
    let mut subscriber = Raw::connect(port);
    let psub = subscriber.request_args(&["PSUBSCRIBE", "__key*__:*"]);
    assert_eq!(
        psub,
        "*3\r\n$10\r\npsubscribe\r\n$10\r\n__key*__:*\r\n:1\r\n"
    );
    subscriber
}

/// The next two messages of `subscriber`: `event` on `key`'s keyspace channel, then `key` on
/// `event`'s keyevent channel (database 0).
fn next_event(subscriber: &mut Raw, event: &str, key: &str) {
    let keyspace = subscriber.read_one(&format!("keyspace {event} {key}"));
    assert_eq!(
        keyspace,
        pmessage("__key*__:*", &format!("__keyspace@0__:{key}"), event)
    );
    let keyevent = subscriber.read_one(&format!("keyevent {event} {key}"));
    assert_eq!(
        keyevent,
        pmessage("__key*__:*", &format!("__keyevent@0__:{event}"), key)
    );
}

#[test]
fn keyspace_events_reach_a_followers_subscribers_and_are_not_fired_again_on_restart() {
    let (mut cluster, leader, followers) = three_nodes("pubsub-keyspace", &[]);
    let follower = followers[0];
    let mut subscriber = keyspace_subscriber(cluster.node(follower).client_port, "KEA");
    let mut writer = Raw::connect(cluster.node(leader).client_port);
    assert_eq!(writer.request("SET foo bar"), "+OK\r\n");
    assert_eq!(writer.request("PSETEX tmp 100 x"), "+OK\r\n");
    next_event(&mut subscriber, "set", "foo");
    next_event(&mut subscriber, "set", "tmp");
    next_event(&mut subscriber, "expire", "tmp");
    // Removed by the leader's tick entry, applied on the follower too.
    next_event(&mut subscriber, "expired", "tmp");
    assert_eq!(writer.request("RPUSH q a b"), ":2\r\n");
    assert_eq!(writer.request("LPOP q 2"), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
    next_event(&mut subscriber, "rpush", "q");
    next_event(&mut subscriber, "lpop", "q");
    next_event(&mut subscriber, "del", "q");
    // Only the classes set: with `Kl`, a string write fires nothing, a list write its event.
    let mut lists_only = keyspace_subscriber(cluster.node(leader).client_port, "Kl");
    writer.request("SET s 1");
    writer.request("LPUSH q x");
    let got = lists_only.read_one("the lpush event");
    assert_eq!(got, pmessage("__key*__:*", "__keyspace@0__:q", "lpush"));
    drop(lists_only);

    // A restart replays the log: none of those entries fires again.
    for i in 0..20 {
        writer.request_args(&["SET", &format!("k{i}"), "v"]);
    }
    drop(subscriber);
    let node = cluster.node_mut(follower);
    node.kill();
    node.spawn();
    let port = cluster.node(follower).client_port;
    eventually("the restarted follower serves", || {
        raw_request(port, &["PING"])
            .ok()
            .filter(|r| *r == Reply::PONG)
    });
    let mut subscriber = keyspace_subscriber(port, "KEA");
    assert_eq!(writer.request("SET after 1"), "+OK\r\n");
    next_event(&mut subscriber, "set", "after");
}

#[test]
fn publish_inside_exec_and_from_scripts_is_delivered_once_when_it_applies() {
    let (cluster, leader, followers) = three_nodes("pubsub-exec", &[]);
    let port = |id: u64| cluster.node(id).client_port;
    let mut on_leader = Raw::connect(port(leader));
    assert_eq!(
        on_leader.request_args(&["SUBSCRIBE", "jobs"]),
        message_count("subscribe", "jobs", 1)
    );
    let mut on_follower = Raw::connect(port(followers[1]));
    on_follower.request_args(&["SUBSCRIBE", "jobs"]);
    // On a follower (forwarded to the leader, which publishes once it applied) and on the
    // leader: the reply counts the receivers on the node that published.
    for (id, tag) in [(followers[0], "f"), (leader, "l")] {
        let mut client = Raw::connect(port(id));
        assert_eq!(client.request("MULTI"), "+OK\r\n");
        assert_eq!(client.request("SET done 1"), "+QUEUED\r\n");
        let queued = client.request_args(&["PUBLISH", "jobs", tag]);
        assert_eq!(queued, "+QUEUED\r\n");
        assert_eq!(client.request("GET done"), "+QUEUED\r\n");
        // Published by the leader either way (a follower forwards the transaction): its one
        // subscriber is what is counted.
        let exec = client.request("EXEC");
        assert_eq!(exec, "*3\r\n+OK\r\n:1\r\n$1\r\n1\r\n", "EXEC on node {id}");
        for subscriber in [&mut on_leader, &mut on_follower] {
            assert_eq!(
                subscriber.read_one("the message"),
                message('*', "jobs", tag)
            );
        }
    }
    // A transaction that aborts (a watched key changed) publishes nothing.
    let mut watcher = Raw::connect(port(leader));
    watcher.request("WATCH w");
    raw_request(port(leader), &["SET", "w", "changed"]).unwrap();
    watcher.request("MULTI");
    watcher.request_args(&["PUBLISH", "jobs", "aborted"]);
    assert_eq!(watcher.request("EXEC"), "*-1\r\n");
    // From a script, run on the leader whichever node it was sent to: once, after its write.
    let script = "redis.call('set', KEYS[1], 'x'); return redis.call('publish', 'jobs', ARGV[1])";
    let mut client = Raw::connect(port(followers[0]));
    let ran = client.request_args(&["EVAL", script, "1", "k", "from-a-script"]);
    assert_eq!(ran, ":0\r\n");
    for subscriber in [&mut on_leader, &mut on_follower] {
        let got = subscriber.read_one("the script's message");
        assert_eq!(got, message('*', "jobs", "from-a-script"));
    }
    // Nothing else was delivered: the next message is the next one published.
    raw_request(port(leader), &["PUBLISH", "jobs", "last"]).unwrap();
    for subscriber in [&mut on_leader, &mut on_follower] {
        assert_eq!(
            subscriber.read_one("the last message"),
            message('*', "jobs", "last")
        );
    }
}

fn message_count(kind: &str, channel: &str, count: u32) -> String {
    format!("*3\r\n{}{}:{count}\r\n", bulk(kind), bulk(channel))
}

#[test]
fn a_subscriber_that_stops_reading_is_disconnected_not_buffered_without_bound() {
    let limit = (1 << 20).to_string();
    let (cluster, leader, followers) = three_nodes(
        "pubsub-slow",
        &["--client-output-buffer-limit-bytes", &limit],
    );
    let follower = cluster.node(followers[0]).client_port;
    let mut slow = Raw::connect(follower);
    slow.request_args(&["SUBSCRIBE", "firehose"]);
    // Published on the leader: 16 MiB for a subscriber that reads nothing, on another node.
    let mut publisher = Raw::connect(cluster.node(leader).client_port);
    let payload = "x".repeat(64 << 10);
    eventually("the slow subscriber is disconnected", || {
        for _ in 0..16 {
            publisher.request_args(&["PUBLISH", "firehose", &payload]);
        }
        let numsub = raw_request(follower, &["PUBSUB", "NUMSUB", "firehose"]).unwrap();
        (format!("{numsub:?}").contains("Integer(0)")).then_some(())
    });
    // The node goes on serving.
    assert_eq!(raw_request(follower, &["PING"]).unwrap(), Reply::PONG);
}

#[test]
fn redis_py_pubsub_against_a_follower() {
    let (cluster, leader, followers) = three_nodes("pubsub-redis-py", &[]);
    let follower = cluster.node(followers[0]).client_port.to_string();
    let leader = cluster.node(leader).client_port.to_string();
    for protocol in ["2", "3"] {
        let py = run_program(
            "python3",
            &["-c", REDIS_PY, &follower, &leader, protocol],
            None,
        );
        assert!(py.0.contains("pubsub ok"), "{py:?}");
    }
}

/// Subscribes on a follower with redis-py's `pubsub()`, publishes on the leader and on the
/// follower, and reads with `get_message` and `listen`.
const REDIS_PY: &str = r#"
import sys, time
import redis
follower, leader, protocol = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sub = redis.Redis(port=follower, protocol=protocol)
p = sub.pubsub()
p.subscribe("chat")
p.psubscribe("ch*")
confirmations = [p.get_message(timeout=5) for _ in range(2)]
assert [c["type"] for c in confirmations] == ["subscribe", "psubscribe"], confirmations
on_leader = redis.Redis(port=leader, protocol=protocol)
on_follower = redis.Redis(port=follower, protocol=protocol)
assert on_leader.publish("chat", "from the leader") == 0
assert on_follower.publish("chat", "from the follower") == 2
got = []
for m in p.listen():
    got.append((m["type"], m["data"]))
    if len(got) == 4:
        break
assert got == [
    ("message", b"from the leader"), ("pmessage", b"from the leader"),
    ("message", b"from the follower"), ("pmessage", b"from the follower"),
], got
assert on_follower.pubsub_numsub("chat") == [(b"chat", 1)]
p.close()
print("pubsub ok")
"#;
