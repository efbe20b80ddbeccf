//! The pub/sub commands of one connection: Redis 7.0's replies, RESP2's subscribed mode, RESP3's
//! pushes, PUBSUB, what is refused (inside MULTI, a message too large for the cluster), and
//! PUBLISH queued in MULTI.

use std::sync::Arc;

use super::*;
use crate::pubsub::PubSub;

fn text(conn: &mut ClientConnection, line: &str) -> String {
    let reply = reply(conn, line);
    String::from_utf8(wire(conn, &reply)).unwrap()
}

fn pair(pubsub: &Arc<PubSub>) -> (ClientConnection, ClientConnection) {
    let conn = |id| ClientConnection::new(id, "c", Limits::default()).with_pubsub(pubsub.clone());
    (conn(1), conn(2))
}

#[test]
fn subscribe_confirms_each_channel_and_counts_channels_and_patterns_together() {
    let pubsub = Arc::new(PubSub::default());
    let (mut sub, mut publisher) = pair(&pubsub);
    assert_eq!(
        text(&mut sub, "SUBSCRIBE a b"),
        "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n"
    );
    assert_eq!(
        text(&mut sub, "PSUBSCRIBE a*"),
        "*3\r\n$10\r\npsubscribe\r\n$2\r\na*\r\n:3\r\n"
    );
    assert_eq!(
        text(&mut sub, "SSUBSCRIBE s"),
        "*3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n"
    );
    assert_eq!(reply(&mut publisher, "PUBLISH a hi"), Reply::Integer(2));
    assert_eq!(reply(&mut publisher, "SPUBLISH a hi"), Reply::Integer(0));
    let numsub = reply(&mut publisher, "PUBSUB NUMSUB a zz");
    assert_eq!(
        numsub,
        Reply::Array(vec![
            Reply::Bulk(b("a")),
            Reply::Integer(1),
            Reply::Bulk(b("zz")),
            Reply::Integer(0)
        ])
    );
    assert_eq!(reply(&mut publisher, "PUBSUB NUMPAT"), Reply::Integer(1));
    assert_eq!(
        reply(&mut publisher, "PUBSUB SHARDCHANNELS"),
        Reply::Array(vec![Reply::Bulk(b("s"))])
    );
    assert!(sub
        .record()
        .line(std::time::Instant::now(), None, -1)
        .contains("flags=P db=0 sub=2 psub=1 ssub=1"));
    assert_eq!(
        text(&mut sub, "UNSUBSCRIBE"),
        "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:2\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:1\r\n"
    );
    assert_eq!(
        text(&mut sub, "PUNSUBSCRIBE"),
        "*3\r\n$12\r\npunsubscribe\r\n$2\r\na*\r\n:0\r\n"
    );
    assert_eq!(
        text(&mut sub, "PUNSUBSCRIBE"),
        "*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n"
    );
}

#[test]
fn resp2_subscribed_mode_allows_only_subscriptions_ping_and_quit() {
    let pubsub = Arc::new(PubSub::default());
    let (mut sub, _) = pair(&pubsub);
    reply(&mut sub, "SUBSCRIBE a");
    assert_eq!(
        text(&mut sub, "PING hi"),
        "*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"
    );
    for (line, name) in [
        ("GET k", "get"),
        ("PUBLISH a x", "publish"),
        ("PUBSUB NUMPAT", "pubsub|numpat"),
    ] {
        assert_eq!(
            reply(&mut sub, line),
            Reply::error(format!(
                "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / \
                 QUIT / RESET are allowed in this context"
            ))
        );
    }
    // HELLO is not allowed in RESP2's subscribed mode either (Redis 7.0).
    assert!(reply(&mut sub, "HELLO 3").is_error());
    // RESP3: pushes, and everything runs.
    reply(&mut sub, "UNSUBSCRIBE");
    reply(&mut sub, "HELLO 3");
    assert_eq!(
        text(&mut sub, "SUBSCRIBE b"),
        ">3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:1\r\n"
    );
    assert_eq!(reply(&mut sub, "PUBSUB NUMPAT"), Reply::Integer(0));
    assert_eq!(reply(&mut sub, "PING"), Reply::PONG);
}

#[test]
fn errors_in_redis_words_and_no_pubsub_inside_multi() {
    let pubsub = Arc::new(PubSub::default());
    pubsub.set_cluster_hook(Box::new(|_| {}), 10);
    let (mut c, _) = pair(&pubsub);
    let arity = |name: &str| {
        Reply::error(format!(
            "ERR wrong number of arguments for '{name}' command"
        ))
    };
    assert_eq!(reply(&mut c, "SUBSCRIBE"), arity("subscribe"));
    assert_eq!(reply(&mut c, "PUBLISH a"), arity("publish"));
    assert_eq!(reply(&mut c, "PUBSUB"), arity("pubsub"));
    assert_eq!(reply(&mut c, "PUBSUB NUMPAT x"), arity("pubsub|numpat"));
    assert_eq!(
        reply(&mut c, "PUBSUB FOO"),
        Reply::error("ERR unknown subcommand 'FOO'. Try PUBSUB HELP.")
    );
    assert!(reply(&mut c, "PUBLISH channel message-too-long").is_error());
    reply(&mut c, "MULTI");
    assert!(reply(&mut c, "SUBSCRIBE a").is_error());
    assert!(reply(&mut c, "EXEC").is_error(), "the transaction aborted");
    assert!(!c.record().pubsub.is_subscribed());
}

/// PUBLISH inside MULTI is queued, not logged: EXEC hands the transaction over with the message
/// at its position, and the message is published only if the transaction applied.
#[test]
fn publish_inside_multi_is_published_when_the_transaction_applies() {
    let pubsub = Arc::new(PubSub::default());
    let (mut sub, mut c) = pair(&pubsub);
    reply(&mut sub, "SUBSCRIBE news");
    reply(&mut c, "MULTI");
    assert_eq!(reply(&mut c, "PUBLISH news early"), Reply::simple("QUEUED"));
    assert_eq!(reply(&mut c, "INCR n"), Reply::simple("QUEUED"));
    assert_eq!(reply(&mut c, "SPUBLISH news late"), Reply::simple("QUEUED"));
    let Dispatch::Exec(transaction) = run(&mut c, "EXEC") else {
        panic!("EXEC proposes the transaction");
    };
    assert_eq!(transaction.commands.len(), 1, "only INCR is logged");
    assert_eq!(
        transaction.requests.len(),
        3,
        "a follower forwards all three"
    );
    let positions: Vec<usize> = transaction.publishes.0.iter().map(|(p, _)| *p).collect();
    assert_eq!(positions, [0, 2]);
    // Aborted (a null array): nothing published, nothing counted.
    let aborted = transaction
        .publishes
        .publish(&pubsub, &Reply::NullArray, &[]);
    assert!(aborted.is_empty());
    assert_eq!(sub.record().pubsub.count(crate::pubsub::Kind::Channel), 1);
    // Applied: published, each answered with its receivers here, in EXEC's order.
    let applied = Reply::Array(vec![Reply::Integer(1)]);
    let replies = transaction.publishes.publish(&pubsub, &applied, &[]);
    assert_eq!(
        splice(applied, &replies),
        Reply::Array(vec![
            Reply::Integer(1),
            Reply::Integer(1),
            Reply::Integer(0)
        ])
    );
    // A transaction of PUBLISH alone still goes through the log (it is published once applied).
    reply(&mut c, "MULTI");
    reply(&mut c, "PUBLISH news alone");
    assert!(matches!(
        run(&mut c, "EXEC"),
        Dispatch::Exec(tx) if tx.commands.is_empty() && !tx.publishes.is_empty()
    ));
}
