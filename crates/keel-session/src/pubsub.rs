//! Redis pub/sub on one node, sans-IO: who is subscribed to what ([`PubSub`]), each subscriber's
//! bounded queue of messages ([`PubSubFeed`]), and the bytes a published message travels to the
//! other nodes in ([`encode_cluster_message`]).
//!
//! Pub/sub never goes through the log. A message published on a node is delivered to that node's
//! matching subscribers at once, and handed to the cluster hook (the server sends it to every peer
//! as a node message, keel's `Handle::send_node_message`); a message from a peer is delivered to
//! this node's subscribers only (never sent on again). So a message reaches each node at most once,
//! in the order its publishing connection published, and PUBLISH answers the number of this node's
//! receivers, as Redis Cluster does.
//!
//! Bounds: a subscriber's queue holds at most its limit in bytes (the server gives the node's
//! `client-output-buffer-limit-bytes`, Redis's `client-output-buffer-limit pubsub` class): a
//! subscriber that does not read fast enough is marked overflowed, its queue dropped, and its
//! connection closed by the server, as MONITOR's is. Publishing never waits on a subscriber.
//! With the hook set, a channel and message must fit one node message
//! ([`PubSub::set_cluster_hook`]'s bound); PUBLISH refuses a longer one.
//!
//! # Cluster message (the bytes of one node message)
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | format, 1                                                          |
//! |      1 |    1 | kind: 1 = PUBLISH, 2 = SPUBLISH                                    |
//! |      2 |    4 | channel length `C` (u32, little-endian)                            |
//! |      6 |    C | channel                                                            |
//! |  6 + C |  var | the message: the rest                                              |
//!
//! A receiver ignores (and counts) a message of another format or kind, or one that does not
//! parse: a newer node's messages are lost on an older one, never misread.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Poll, Waker};

use bytes::{BufMut, Bytes, BytesMut};
use keel_redis::glob::{glob_match, Case};
use keel_resp::{encode, ProtocolVersion, Reply};

use crate::connection::ClientRecord;

/// The three namespaces of subscriptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// SUBSCRIBE / PUBLISH.
    Channel,
    /// PSUBSCRIBE: glob patterns over PUBLISH's channels.
    Pattern,
    /// SSUBSCRIBE / SPUBLISH: shard channels (one shard here: the whole cluster).
    Shard,
}

impl Kind {
    fn index(self) -> usize {
        self as usize
    }
}

/// Cluster message format this build writes and reads.
const CLUSTER_FORMAT: u8 = 1;
const CLUSTER_PUBLISH: u8 = 1;
const CLUSTER_SPUBLISH: u8 = 2;
/// The cluster message's bytes besides the channel and the message.
pub const CLUSTER_HEADER_BYTES: usize = 6;

/// What the server does with a message published here: send it to every other node.
pub type ClusterHook = Box<dyn Fn(Bytes) + Send + Sync>;

/// A node's subscriptions and its cluster hook. One per node, shared by its connections.
#[derive(Default)]
pub struct PubSub {
    registry: Mutex<Registry>,
    hook: OnceLock<(ClusterHook, usize)>,
    /// Messages from peers that were not understood (another format, kind, or garbage).
    pub refused_from_peers: AtomicU64,
    /// Messages from peers delivered here.
    pub received_from_peers: AtomicU64,
}

impl std::fmt::Debug for PubSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PubSub").finish_non_exhaustive()
    }
}

/// Subscribers by name, per kind.
#[derive(Default)]
struct Registry {
    by_kind: [HashMap<Bytes, BTreeMap<u64, Arc<ClientRecord>>>; 3],
}

impl PubSub {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Every critical section is a few map operations and queue appends: nothing panics there.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends what is published here to the other nodes through `hook`, refusing a channel and
    /// message longer together than `bytes_max` (what one node message holds, less
    /// [`CLUSTER_HEADER_BYTES`]). Set once; later calls are ignored.
    pub fn set_cluster_hook(&self, hook: ClusterHook, bytes_max: usize) {
        let _ = self.hook.set((hook, bytes_max));
    }

    /// The longest channel and message PUBLISH takes together, if bounded.
    pub fn publish_bytes_max(&self) -> Option<usize> {
        self.hook.get().map(|(_, max)| *max)
    }

    /// Subscribes `client` to `name`; false if it was already.
    pub fn subscribe(&self, kind: Kind, name: &Bytes, client: &Arc<ClientRecord>) -> bool {
        let mut registry = self.lock();
        if !client.pubsub.add(kind, name) {
            return false;
        }
        let subscribers = registry.by_kind[kind.index()].entry(name.clone());
        subscribers
            .or_default()
            .insert(client.id, Arc::clone(client));
        true
    }

    /// Unsubscribes `client` from `name`; false if it was not subscribed.
    pub fn unsubscribe(&self, kind: Kind, name: &Bytes, client: &ClientRecord) -> bool {
        let mut registry = self.lock();
        if !client.pubsub.remove(kind, name) {
            return false;
        }
        let map = &mut registry.by_kind[kind.index()];
        if let Some(subscribers) = map.get_mut(name) {
            subscribers.remove(&client.id);
            if subscribers.is_empty() {
                map.remove(name);
            }
        }
        true
    }

    /// Ends every subscription of a connection that closed.
    pub fn forget(&self, client: &ClientRecord) {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            for name in client.pubsub.names(kind) {
                self.unsubscribe(kind, &name, client);
            }
        }
    }

    /// Delivers `message` on `channel` (a shard channel with `shard`) to this node's subscribers,
    /// and sends it to the other nodes. Its receivers here (a client matched by the channel and
    /// by a pattern counts twice, as in Redis).
    pub fn publish(&self, shard: bool, channel: &Bytes, message: &Bytes) -> usize {
        let receivers = self.deliver(shard, channel, message);
        if let Some((hook, _)) = self.hook.get() {
            hook(encode_cluster_message(shard, channel, message));
        }
        receivers
    }

    /// Delivers `message` on `channel` to this node's subscribers only, never to the other
    /// nodes: a keyspace notification, which every node fires for itself when it applies the
    /// entry. Its receivers here.
    pub fn publish_local(&self, channel: &Bytes, message: &Bytes) -> usize {
        self.deliver(false, channel, message)
    }

    /// A cluster message from another node: delivered to this node's subscribers only.
    pub fn receive_from_peer(&self, bytes: &[u8]) {
        match decode_cluster_message(bytes) {
            Some((shard, channel, message)) => {
                self.received_from_peers.fetch_add(1, Ordering::Relaxed);
                self.deliver(shard, &channel, &message);
            }
            None => {
                self.refused_from_peers.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn deliver(&self, shard: bool, channel: &Bytes, message: &Bytes) -> usize {
        let registry = self.lock();
        let mut receivers = 0;
        let (kind, name) = if shard {
            (Kind::Shard, "smessage")
        } else {
            (Kind::Channel, "message")
        };
        if let Some(subscribers) = registry.by_kind[kind.index()].get(channel) {
            let push = [
                Reply::bulk(name),
                Reply::Bulk(channel.clone()),
                Reply::Bulk(message.clone()),
            ];
            let encoded = Encoded::new(push);
            for client in subscribers.values() {
                client.pubsub.push(&encoded);
                receivers += 1;
            }
        }
        if shard {
            return receivers;
        }
        for (pattern, subscribers) in &registry.by_kind[Kind::Pattern.index()] {
            if !glob_match(pattern, channel, Case::Sensitive) {
                continue;
            }
            let encoded = Encoded::new([
                Reply::bulk("pmessage"),
                Reply::Bulk(pattern.clone()),
                Reply::Bulk(channel.clone()),
                Reply::Bulk(message.clone()),
            ]);
            for client in subscribers.values() {
                client.pubsub.push(&encoded);
                receivers += 1;
            }
        }
        receivers
    }

    /// PUBSUB CHANNELS / SHARDCHANNELS: the names with a subscriber here, matching `pattern`.
    pub fn channels(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let registry = self.lock();
        let mut names: Vec<Bytes> = registry.by_kind[kind.index()]
            .keys()
            .filter(|name| pattern.is_none_or(|p| glob_match(p, name, Case::Sensitive)))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// PUBSUB NUMSUB / SHARDNUMSUB: each name's subscribers here.
    pub fn numsub(&self, kind: Kind, name: &[u8]) -> usize {
        self.lock().by_kind[kind.index()]
            .get(name)
            .map_or(0, BTreeMap::len)
    }

    /// The channels (not shard channels) with a subscriber here: INFO's `pubsub_channels`.
    pub fn channel_count(&self) -> usize {
        self.lock().by_kind[Kind::Channel.index()].len()
    }

    /// PUBSUB NUMPAT: the distinct patterns subscribed to here.
    pub fn numpat(&self) -> usize {
        self.lock().by_kind[Kind::Pattern.index()].len()
    }
}

/// A message encoded once per protocol version, as subscribers need it.
struct Encoded {
    items: Vec<Reply>,
    resp2: OnceLock<Bytes>,
    resp3: OnceLock<Bytes>,
}

impl Encoded {
    fn new(items: impl Into<Vec<Reply>>) -> Self {
        Encoded {
            items: items.into(),
            resp2: OnceLock::new(),
            resp3: OnceLock::new(),
        }
    }

    fn get(&self, resp3: bool) -> &Bytes {
        let (cell, version) = match resp3 {
            true => (&self.resp3, ProtocolVersion::Resp3),
            false => (&self.resp2, ProtocolVersion::Resp2),
        };
        cell.get_or_init(|| {
            let mut out = BytesMut::new();
            encode(&Reply::Push(self.items.clone()), version, &mut out);
            out.freeze()
        })
    }
}

/// The bytes of a message published here, for the other nodes (format in the module docs).
pub fn encode_cluster_message(shard: bool, channel: &[u8], message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(CLUSTER_HEADER_BYTES + channel.len() + message.len());
    out.put_u8(CLUSTER_FORMAT);
    out.put_u8(if shard {
        CLUSTER_SPUBLISH
    } else {
        CLUSTER_PUBLISH
    });
    out.put_u32_le(u32::try_from(channel.len()).unwrap_or(u32::MAX));
    out.put_slice(channel);
    out.put_slice(message);
    out.freeze()
}

/// Whether it is a shard message, its channel and its message; `None` if it does not parse.
fn decode_cluster_message(bytes: &[u8]) -> Option<(bool, Bytes, Bytes)> {
    let (&[format, kind], rest) = bytes.split_first_chunk::<2>()?;
    let shard = match (format, kind) {
        (CLUSTER_FORMAT, CLUSTER_PUBLISH) => false,
        (CLUSTER_FORMAT, CLUSTER_SPUBLISH) => true,
        _ => return None,
    };
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    if len > rest.len() {
        return None;
    }
    let (channel, message) = rest.split_at(len);
    Some((
        shard,
        Bytes::copy_from_slice(channel),
        Bytes::copy_from_slice(message),
    ))
}

/// What the session takes from a subscriber's queue ([`PubSubFeed::next`]).
#[derive(Debug, PartialEq, Eq)]
pub enum PubSubEvent {
    /// Messages to send, encoded in the subscriber's protocol version.
    Messages(BytesMut),
    /// The queue went past its bound: close the connection.
    Overflowed,
}

/// One connection's subscriptions and its queue of messages, on its [`ClientRecord`].
#[derive(Debug, Default)]
pub struct PubSubFeed {
    state: Mutex<FeedState>,
    /// Subscriptions per kind, read without the lock (CLIENT LIST, the subscribed mode check).
    counts: [AtomicUsize; 3],
    resp3: AtomicBool,
    limit: AtomicUsize,
    /// Whether messages wait in the queue (or it overflowed), read without the lock: every wait
    /// of every connection polls the feed, and most connections never subscribe.
    pending: AtomicBool,
}

#[derive(Debug, Default)]
struct FeedState {
    names: [BTreeSet<Bytes>; 3],
    queued: BytesMut,
    overflowed: bool,
    waker: Option<Waker>,
}

impl PubSubFeed {
    fn lock(&self) -> MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bounds the queue to `bytes` and encodes what comes next in `protocol`.
    pub fn configure(&self, limit: usize, protocol: ProtocolVersion) {
        self.limit.store(limit, Ordering::Relaxed);
        let resp3 = protocol == ProtocolVersion::Resp3;
        self.resp3.store(resp3, Ordering::Relaxed);
    }

    /// Subscriptions of `kind`.
    pub fn count(&self, kind: Kind) -> usize {
        self.counts[kind.index()].load(Ordering::Relaxed)
    }

    /// Whether the connection has any subscription (Redis's subscribed mode).
    pub fn is_subscribed(&self) -> bool {
        self.counts.iter().any(|c| c.load(Ordering::Relaxed) > 0)
    }

    /// The names of `kind` subscribed to, in byte order.
    pub fn names(&self, kind: Kind) -> Vec<Bytes> {
        self.lock().names[kind.index()].iter().cloned().collect()
    }

    fn add(&self, kind: Kind, name: &Bytes) -> bool {
        let mut state = self.lock();
        let added = state.names[kind.index()].insert(name.clone());
        let count = state.names[kind.index()].len();
        self.counts[kind.index()].store(count, Ordering::Relaxed);
        added
    }

    fn remove(&self, kind: Kind, name: &Bytes) -> bool {
        let mut state = self.lock();
        let removed = state.names[kind.index()].remove(name);
        let count = state.names[kind.index()].len();
        self.counts[kind.index()].store(count, Ordering::Relaxed);
        removed
    }

    /// Queues `message`, or marks the queue overflowed if it would pass its bound.
    fn push(&self, message: &Encoded) {
        let bytes = message.get(self.resp3.load(Ordering::Relaxed));
        let limit = match self.limit.load(Ordering::Relaxed) {
            0 => usize::MAX,
            limit => limit,
        };
        let mut state = self.lock();
        if state.overflowed {
            return;
        }
        if state.queued.len() + bytes.len() > limit {
            state.overflowed = true;
            state.queued = BytesMut::new();
        } else {
            state.queued.extend_from_slice(bytes);
        }
        self.pending.store(true, Ordering::Release);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Waits for messages (or the overflow) and takes them. Pending while there are none, so
    /// the session can poll it beside the socket at all times.
    pub async fn next(&self) -> PubSubEvent {
        std::future::poll_fn(|cx| {
            // Only this connection's own task subscribes it, between two waits: a connection
            // with no subscription and nothing queued gets nothing until its next wait.
            if !self.is_subscribed() && !self.pending.load(Ordering::Acquire) {
                return Poll::Pending;
            }
            let mut state = self.lock();
            if state.overflowed {
                return Poll::Ready(PubSubEvent::Overflowed);
            }
            if !state.queued.is_empty() {
                self.pending.store(false, Ordering::Release);
                return Poll::Ready(PubSubEvent::Messages(std::mem::take(&mut state.queued)));
            }
            crate::connection::monitor::wake_here(&mut state.waker, cx);
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests;
