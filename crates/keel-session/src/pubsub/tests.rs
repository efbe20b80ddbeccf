use super::*;

fn client(id: u64, resp3: bool, limit: usize) -> Arc<ClientRecord> {
    let record = Arc::new(ClientRecord::new(id, format!("c{id}"), String::new(), -1));
    let protocol = if resp3 {
        ProtocolVersion::Resp3
    } else {
        ProtocolVersion::Resp2
    };
    record.pubsub.configure(limit, protocol);
    record
}

fn taken(record: &ClientRecord) -> Vec<u8> {
    let mut state = record.pubsub.lock();
    record.pubsub.pending.store(false, Ordering::Relaxed);
    std::mem::take(&mut state.queued).to_vec()
}

#[test]
fn channels_and_patterns_deliver_and_count_receivers() {
    let pubsub = PubSub::default();
    let (a, b) = (client(1, false, 0), client(2, true, 0));
    let chan = Bytes::from_static(b"news.tech");
    assert!(pubsub.subscribe(Kind::Channel, &chan, &a));
    assert!(!pubsub.subscribe(Kind::Channel, &chan, &a), "once");
    assert!(pubsub.subscribe(Kind::Pattern, &Bytes::from_static(b"news.*"), &a));
    assert!(pubsub.subscribe(Kind::Channel, &chan, &b));
    assert_eq!(pubsub.publish(false, &chan, &Bytes::from_static(b"hi")), 3);
    assert_eq!(
        taken(&a),
        b"*3\r\n$7\r\nmessage\r\n$9\r\nnews.tech\r\n$2\r\nhi\r\n\
          *4\r\n$8\r\npmessage\r\n$6\r\nnews.*\r\n$9\r\nnews.tech\r\n$2\r\nhi\r\n"
    );
    assert_eq!(
        taken(&b),
        b">3\r\n$7\r\nmessage\r\n$9\r\nnews.tech\r\n$2\r\nhi\r\n"
    );
    // A shard channel is its own namespace.
    assert_eq!(pubsub.publish(true, &chan, &Bytes::from_static(b"x")), 0);
    assert_eq!(
        pubsub.channels(Kind::Channel, Some(b"news.*")),
        vec![chan.clone()]
    );
    assert_eq!(
        (pubsub.numsub(Kind::Channel, &chan), pubsub.numpat()),
        (2, 1)
    );
    pubsub.forget(&a);
    assert_eq!(
        (pubsub.numsub(Kind::Channel, &chan), pubsub.numpat()),
        (1, 0)
    );
    assert!(!a.pubsub.is_subscribed());
}

#[test]
fn a_subscriber_past_its_bound_overflows_and_its_queue_is_dropped() {
    let pubsub = PubSub::default();
    let slow = client(1, false, 100);
    let chan = Bytes::from_static(b"c");
    pubsub.subscribe(Kind::Channel, &chan, &slow);
    for _ in 0..10 {
        pubsub.publish(false, &chan, &Bytes::from(vec![b'x'; 30]));
    }
    let state = slow.pubsub.lock();
    assert!(state.overflowed && state.queued.is_empty());
}

#[test]
fn cluster_messages_round_trip_and_garbage_is_counted_not_delivered() {
    let pubsub = PubSub::default();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&sent);
    pubsub.set_cluster_hook(Box::new(move |b| into.lock().unwrap().push(b)), 1000);
    let a = client(1, false, 0);
    pubsub.subscribe(Kind::Shard, &Bytes::from_static(b"s"), &a);
    pubsub.publish(true, &Bytes::from_static(b"s"), &Bytes::from_static(b"m"));
    let message = sent.lock().unwrap()[0].clone();
    assert_eq!(
        decode_cluster_message(&message),
        Some((true, "s".into(), "m".into()))
    );
    taken(&a);
    pubsub.receive_from_peer(&message);
    assert_eq!(taken(&a), b"*3\r\n$8\r\nsmessage\r\n$1\r\ns\r\n$1\r\nm\r\n");
    for garbage in [
        &b""[..],
        b"\x01",
        b"\x02\x01\0\0\0\0",
        b"\x01\x01\xff\0\0\0ab",
        b"\x01\x09",
    ] {
        pubsub.receive_from_peer(garbage);
    }
    assert_eq!(pubsub.refused_from_peers.load(Ordering::Relaxed), 5);
    assert!(taken(&a).is_empty());
}
