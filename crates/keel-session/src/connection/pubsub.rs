//! The pub/sub commands of one connection: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE,
//! SSUBSCRIBE, SUNSUBSCRIBE, PUBLISH, SPUBLISH and PUBSUB, answered by this node itself (a
//! follower never forwards them: pub/sub does not go through the log; `crate::pubsub`), with
//! Redis 7.0's replies.
//!
//! RESP2: a connection with a subscription is in subscribed mode: only the (un)subscribe
//! commands, PING (answered `pong` and its message as an array), QUIT and RESET run; anything
//! else is refused in Redis's words. RESP3: confirmations and messages are pushes (`>`), and every
//! command runs. Inside MULTI, PUBLISH and SPUBLISH are queued and published once the
//! transaction applied (`Transaction::publishes`); the other pub/sub commands are refused (the
//! transaction aborts).

use bytes::Bytes;
use keel_redis::command::{CommandError, CommandSpec};
use keel_resp::{ProtocolVersion, Reply};

use super::{ClientConnection, Dispatch};
use crate::pubsub::Kind;

/// A pub/sub command, parsed.
enum PubSubCommand {
    Subscribe(Kind, Vec<Bytes>),
    Unsubscribe(Kind, Vec<Bytes>),
    Publish {
        shard: bool,
        channel: Bytes,
        message: Bytes,
    },
    /// `PUBSUB <subcommand> args...`.
    Introspect(Vec<Bytes>),
}

/// The commands RESP2's subscribed mode lets through besides the pub/sub ones.
const ALLOWED_SUBSCRIBED: [&[u8]; 3] = [b"ping", b"quit", b"reset"];

fn wrong_arity(name: &str) -> Reply {
    CommandError::WrongArity(name.into()).to_reply()
}

/// The pub/sub commands' names.
const PUBSUB_COMMANDS: [&str; 9] = [
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "publish",
    "spublish",
    "pubsub",
];

/// `args` as a pub/sub command: `None` if it is not one; `Some(Err)` with its error if it is
/// one of the wrong arity.
fn parse(args: &[Bytes]) -> Option<Result<PubSubCommand, Reply>> {
    // Every request of every connection comes here first: it is looked up without an
    // allocation, and only a pub/sub command's name is copied.
    let name = PUBSUB_COMMANDS
        .iter()
        .find(|name| name.as_bytes().eq_ignore_ascii_case(&args[0]))?
        .to_string();
    let rest = || args[1..].to_vec();
    let (kind, subscribe) = match name.as_str() {
        "subscribe" => (Kind::Channel, true),
        "psubscribe" => (Kind::Pattern, true),
        "ssubscribe" => (Kind::Shard, true),
        "unsubscribe" => (Kind::Channel, false),
        "punsubscribe" => (Kind::Pattern, false),
        "sunsubscribe" => (Kind::Shard, false),
        "publish" | "spublish" => {
            let [_, channel, message] = args else {
                return Some(Err(wrong_arity(&name)));
            };
            return Some(Ok(PubSubCommand::Publish {
                shard: name == "spublish",
                channel: channel.clone(),
                message: message.clone(),
            }));
        }
        "pubsub" if args.len() < 2 => return Some(Err(wrong_arity(&name))),
        "pubsub" => return Some(Ok(PubSubCommand::Introspect(rest()))),
        _ => return None,
    };
    Some(match (subscribe, args.len() == 1) {
        (true, true) => Err(wrong_arity(&name)),
        (true, false) => Ok(PubSubCommand::Subscribe(kind, rest())),
        (false, _) => Ok(PubSubCommand::Unsubscribe(kind, rest())),
    })
}

/// A transaction's queued PUBLISH and SPUBLISH messages, by position in EXEC's array.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Publishes(pub Vec<(usize, Publish)>);

/// One message to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publish {
    pub shard: bool,
    pub channel: Bytes,
    pub message: Bytes,
}

impl Publishes {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Publishes every message through `pubsub` (this node's subscribers and the cluster hook,
    /// as PUBLISH does) if the transaction applied (`applied` an array: not aborted, not an
    /// error), and answers `local_replies` with each one's receivers on this node added.
    pub fn publish(
        &self,
        pubsub: &crate::pubsub::PubSub,
        applied: &Reply,
        local_replies: &[(usize, Reply)],
    ) -> Vec<(usize, Reply)> {
        let mut replies = local_replies.to_vec();
        if self.0.is_empty() || !matches!(applied, Reply::Array(_)) {
            return replies;
        }
        for (position, publish) in &self.0 {
            let reply = match publish_checked(pubsub, publish) {
                Ok(receivers) => Reply::Integer(receivers as i64),
                Err(error) => error,
            };
            replies.push((*position, reply));
        }
        replies.sort_by_key(|(position, _)| *position);
        replies
    }

    /// EXEC's reply: `applied` with the local replies and, if it applied, each message's
    /// receivers put in their places, its messages published through `pubsub` (none: answered
    /// as published to no one).
    pub fn splice(
        &self,
        pubsub: Option<&crate::pubsub::PubSub>,
        applied: Reply,
        local_replies: &[(usize, Reply)],
    ) -> Reply {
        if self.is_empty() {
            return super::splice(applied, local_replies);
        }
        let replies = match pubsub {
            Some(pubsub) => self.publish(pubsub, &applied, local_replies),
            None => {
                let mut replies = local_replies.to_vec();
                replies.extend(self.unpublished());
                replies.sort_by_key(|(position, _)| *position);
                replies
            }
        };
        super::splice(applied, &replies)
    }

    /// Each message as a reply of 0 receivers: for a transaction proposed again where the
    /// messages cannot be published (at most once: they are lost).
    pub fn unpublished(&self) -> Vec<(usize, Reply)> {
        self.0
            .iter()
            .map(|(p, _)| (*p, Reply::Integer(0)))
            .collect()
    }
}

impl<W, R> super::pipeline::Pipeline<W, R> {
    /// Publishes the messages of the transactions this connection runs through `pubsub`.
    pub fn set_pubsub(&mut self, pubsub: std::sync::Arc<crate::pubsub::PubSub>) {
        self.pubsub = Some(pubsub);
    }
}

/// Publishes `publish` through `pubsub` (this node's subscribers and the cluster hook): its
/// receivers on this node, or the error of a message too large to send to the other nodes.
pub(super) fn publish_checked(
    pubsub: &crate::pubsub::PubSub,
    publish: &Publish,
) -> Result<usize, Reply> {
    let Publish {
        shard,
        channel,
        message,
    } = publish;
    if let Some(max) = pubsub.publish_bytes_max() {
        if channel.len() + message.len() > max {
            return Err(Reply::error(format!(
                "ERR message too large to publish: a channel and its message take at most \
                 {max} bytes together in a keel cluster"
            )));
        }
    }
    Ok(pubsub.publish(*shard, channel, message))
}

/// The confirmation's name for `kind`, subscribing or not.
fn confirmation(kind: Kind, subscribe: bool) -> &'static str {
    match (kind, subscribe) {
        (Kind::Channel, true) => "subscribe",
        (Kind::Pattern, true) => "psubscribe",
        (Kind::Shard, true) => "ssubscribe",
        (Kind::Channel, false) => "unsubscribe",
        (Kind::Pattern, false) => "punsubscribe",
        (Kind::Shard, false) => "sunsubscribe",
    }
}

impl ClientConnection {
    /// The node's pub/sub: a pub/sub command answered, or RESP2's subscribed mode refusing
    /// another command (or answering PING); `None` for everything else. Called by `dispatch`
    /// once the connection is authenticated.
    pub(super) fn dispatch_pubsub(&mut self, args: &[Bytes]) -> Option<Dispatch> {
        let parsed = match parse(args) {
            // RESP2's subscribed mode lets only the (un)subscribe commands through.
            Some(Ok(PubSubCommand::Publish { .. } | PubSubCommand::Introspect(_))) | None => {
                if let Some(refused) = self.subscribed_mode(args) {
                    return Some(Dispatch::Reply(refused));
                }
                parse(args)?
            }
            Some(parsed) => parsed,
        };
        if self.queue.is_some() {
            // Queued, and published when the transaction applies (`dispatch_queued`).
            if matches!(parsed, Ok(PubSubCommand::Publish { .. })) {
                return None;
            }
            self.note_request(args);
            let queue = self.queue.as_mut().expect("in a transaction");
            return Some(queue.abort(CommandError::NotAllowedInMulti));
        }
        self.note_request(args);
        self.monitored.clear();
        self.monitor(args);
        let reply = match parsed {
            Err(error) => error,
            Ok(PubSubCommand::Subscribe(kind, names)) => self.subscribe(kind, &names),
            Ok(PubSubCommand::Unsubscribe(kind, names)) => self.unsubscribe(kind, names),
            Ok(PubSubCommand::Publish {
                shard,
                channel,
                message,
            }) => self.publish(shard, &channel, &message),
            Ok(PubSubCommand::Introspect(args)) => self.introspect(&args),
        };
        Some(Dispatch::Reply(reply))
    }

    /// RESP2 with a subscription: PING answered the pub/sub way, commands other than those
    /// allowed refused (an unknown command is left to its own error, as Redis looks it up first).
    fn subscribed_mode(&mut self, args: &[Bytes]) -> Option<Reply> {
        if self.protocol != ProtocolVersion::Resp2 || !self.record.pubsub.is_subscribed() {
            return None;
        }
        let name = match parse(args) {
            Some(Ok(PubSubCommand::Introspect(sub))) => {
                format!(
                    "pubsub|{}",
                    String::from_utf8_lossy(&sub[0]).to_ascii_lowercase()
                )
            }
            Some(_) => String::from_utf8_lossy(&args[0]).to_ascii_lowercase(),
            None => CommandSpec::lookup(&args[0])?.name.to_ascii_lowercase(),
        };
        if name == "ping" && args.len() <= 2 {
            self.note_request(args);
            let message = args.get(1).cloned().unwrap_or_default();
            return Some(Reply::Array(vec![
                Reply::bulk("pong"),
                Reply::Bulk(message),
            ]));
        }
        if ALLOWED_SUBSCRIBED.contains(&name.as_bytes()) {
            return None;
        }
        Some(Reply::error(format!(
            "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
             RESET are allowed in this context"
        )))
    }

    /// What a confirmation counts: Redis counts channels and patterns together, shard channels
    /// apart.
    fn subscriptions(&self, kind: Kind) -> i64 {
        let feed = &self.record.pubsub;
        let count = match kind {
            Kind::Shard => feed.count(Kind::Shard),
            _ => feed.count(Kind::Channel) + feed.count(Kind::Pattern),
        };
        count as i64
    }

    fn confirm(&self, kind: Kind, subscribe: bool, name: Option<Bytes>) -> Reply {
        Reply::Push(vec![
            Reply::bulk(confirmation(kind, subscribe)),
            name.map_or(Reply::Null, Reply::Bulk),
            Reply::Integer(self.subscriptions(kind)),
        ])
    }

    fn subscribe(&mut self, kind: Kind, names: &[Bytes]) -> Reply {
        self.record
            .pubsub
            .configure(self.monitor_limit, self.protocol);
        let mut confirmations = Vec::with_capacity(names.len());
        for name in names {
            self.pubsub.subscribe(kind, name, &self.record);
            confirmations.push(self.confirm(kind, true, Some(name.clone())));
        }
        Reply::Several(confirmations)
    }

    /// Without names: from every subscription of `kind` (one confirmation with a null name when
    /// there is none, as Redis answers).
    fn unsubscribe(&mut self, kind: Kind, names: Vec<Bytes>) -> Reply {
        let names = match names.is_empty() {
            true => self.record.pubsub.names(kind),
            false => names,
        };
        if names.is_empty() {
            return Reply::Several(vec![self.confirm(kind, false, None)]);
        }
        let mut confirmations = Vec::with_capacity(names.len());
        for name in names {
            self.pubsub.unsubscribe(kind, &name, &self.record);
            confirmations.push(self.confirm(kind, false, Some(name)));
        }
        Reply::Several(confirmations)
    }

    fn publish(&mut self, shard: bool, channel: &Bytes, message: &Bytes) -> Reply {
        let publish = Publish {
            shard,
            channel: channel.clone(),
            message: message.clone(),
        };
        match publish_checked(&self.pubsub, &publish) {
            Ok(receivers) => Reply::Integer(receivers as i64),
            Err(error) => error,
        }
    }

    /// PUBSUB CHANNELS [pattern] | NUMSUB [channel ...] | NUMPAT | SHARDCHANNELS [pattern] |
    /// SHARDNUMSUB [channel ...], about this node's subscribers.
    fn introspect(&self, args: &[Bytes]) -> Reply {
        let sub = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let pubsub = &self.pubsub;
        let names = |kind| -> Reply {
            let names = pubsub.channels(kind, args.get(1).map(|p| &p[..]));
            Reply::Array(names.into_iter().map(Reply::Bulk).collect())
        };
        // A flat array in RESP3 too, as Redis 7.0 answers.
        let numsub = |kind| -> Reply {
            let counts = args[1..].iter().flat_map(|name| {
                let count = pubsub.numsub(kind, name) as i64;
                [Reply::Bulk(name.clone()), Reply::Integer(count)]
            });
            Reply::Array(counts.collect())
        };
        match (sub.as_str(), args.len()) {
            ("channels", 1 | 2) => names(Kind::Channel),
            ("shardchannels", 1 | 2) => names(Kind::Shard),
            ("numsub", _) => numsub(Kind::Channel),
            ("shardnumsub", _) => numsub(Kind::Shard),
            ("numpat", 1) => Reply::Integer(pubsub.numpat() as i64),
            ("numpat", _) => wrong_arity("pubsub|numpat"),
            ("channels" | "shardchannels", _) => Reply::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
                String::from_utf8_lossy(&args[0])
            )),
            _ => Reply::error(format!(
                "ERR unknown subcommand '{}'. Try PUBSUB HELP.",
                String::from_utf8_lossy(&args[0])
            )),
        }
    }
}
