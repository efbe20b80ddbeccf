//! Keyspace notifications (`notify-keyspace-events`): the events of each entry this node
//! applies, published to this node's own subscribers.
//!
//! Every replica applies every entry, so each node fires the events of what it applies, for its
//! own subscribers: nothing crosses the peer transport (a notification never goes through the
//! cluster hook of `pubsub.rs`), and a subscriber on a follower hears the writes made through
//! the leader. What holds, per node: an event is published at most once (a subscriber's full
//! queue, a node that stops or a failover may lose it, as Redis may); never for an entry the node
//! applied before it restarted. The node is live only once its startup replay is done and the
//! index of the last entry its log held then is known (read from the node's status): the
//! entries up to that index may have been applied, and notified, before the restart, so none of
//! them is notified, including those applied after replay because the commit index persisted
//! lagged. A snapshot restore notifies nothing. The state machine notes events only while some
//! class is set and the node is live ([`keel_redis::KeyEventsListener`]), so with the default
//! (no classes) applying costs nothing more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use keel_redis::notify::{self, KeyEvent};
use keel_session::connection::SharedConfig;
use keel_session::pubsub::PubSub;

/// The node's listener for keyspace events; see the module documentation.
#[derive(Debug)]
pub struct KeyspaceNotifier {
    pubsub: Arc<PubSub>,
    /// The settings in force (set once the server has them).
    config: OnceLock<Arc<SharedConfig>>,
    /// Entries at or below this index are never notified: `u64::MAX` until the node is live.
    live_after: AtomicU64,
}

impl KeyspaceNotifier {
    pub fn new(pubsub: Arc<PubSub>) -> Self {
        KeyspaceNotifier {
            pubsub,
            config: OnceLock::new(),
            live_after: AtomicU64::new(u64::MAX),
        }
    }

    /// The settings whose `notify-keyspace-events` decides what is published.
    pub fn set_config(&self, config: Arc<SharedConfig>) {
        let _ = self.config.set(config);
    }

    /// The node is live: entries after `index` (the last its log held at start) are notified.
    pub fn live_after(&self, index: u64) {
        self.live_after.store(index, Ordering::Release);
    }

    fn flags(&self) -> u16 {
        self.config
            .get()
            .map_or(0, |config| config.notify_keyspace_events())
    }
}

impl keel_redis::KeyEventsListener for KeyspaceNotifier {
    fn listening(&self, index: u64) -> bool {
        index > self.live_after.load(Ordering::Acquire) && notify::delivers(self.flags())
    }

    fn events(&self, events: Vec<KeyEvent>) {
        for (channel, message) in notify::messages(self.flags(), &events) {
            self.pubsub.publish_local(&channel, &message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use keel_redis::KeyEventsListener;
    use keel_session::connection::ConfigValues;

    #[test]
    fn nothing_is_noted_before_the_node_is_live_or_without_classes() {
        let notifier = KeyspaceNotifier::new(Arc::default());
        let config = Arc::new(SharedConfig::new(ConfigValues {
            notify_keyspace_events: notify::KEYSPACE | notify::ALL,
            ..ConfigValues::default()
        }));
        assert!(!notifier.listening(5), "no settings yet");
        notifier.set_config(Arc::clone(&config));
        assert!(!notifier.listening(5), "not live yet");
        notifier.live_after(5);
        assert!(!notifier.listening(5), "applied before the restart");
        assert!(notifier.listening(6));
        let off = SharedConfig::new(ConfigValues::default());
        let notifier = KeyspaceNotifier::new(Arc::default());
        notifier.set_config(Arc::new(off));
        notifier.live_after(0);
        assert!(!notifier.listening(6), "no class set");
    }

    #[test]
    fn events_reach_local_subscribers_only() {
        let pubsub = Arc::new(PubSub::default());
        let sent = Arc::new(std::sync::Mutex::new(0));
        let counter = Arc::clone(&sent);
        pubsub.set_cluster_hook(Box::new(move |_| *counter.lock().unwrap() += 1), 1 << 20);
        let notifier = KeyspaceNotifier::new(Arc::clone(&pubsub));
        notifier.set_config(Arc::new(SharedConfig::new(ConfigValues {
            notify_keyspace_events: notify::KEYEVENT | notify::STRING,
            ..ConfigValues::default()
        })));
        notifier.events(vec![KeyEvent {
            db: 0,
            class: notify::STRING,
            event: "set",
            key: Bytes::from_static(b"k"),
        }]);
        assert_eq!(*sent.lock().unwrap(), 0, "nothing sent to the peers");
    }
}
