//! One client connection's protocol state, sans-IO: the part of the server that needs no
//! consensus. The runtime (or a test server) owns the socket and does:
//!
//! ```text
//! read bytes -> Decoder::decode -> ClientConnection::dispatch(args, node)
//!     Dispatch::Reply / ReplyAndClose   answered here (PING, HELLO, CLIENT, CONFIG GET, INFO, ...)
//!     Dispatch::Write(cmd)              propose LogCommand { client_id, seq, cmd }, reply with the
//!                                       state machine's WriteReply
//!     Dispatch::Read(cmd)               linearizable read, reply with KvStateMachine::read
//!     Dispatch::Admin(cmd)              membership / transfer / snapshot, by the runtime
//! -> ClientConnection::encode(reply) in this connection's protocol version -> write bytes
//! ```
//!
//! A protocol error from the decoder is answered with [`crate::resp::ProtocolError::to_reply`]
//! and closes this connection only.

mod info;
mod introspection;

use bytes::{Bytes, BytesMut};

pub use info::{MemberInfo, NodeStatus};

use crate::command::{
    AdminCommand, ClientAttribute, ClientCommand, Command, HelloArgs, LocalCommand, ReadCommand,
    WriteCommand,
};
use crate::resp::{encode, Limits, ProtocolVersion, Reply};

/// The Redis version keel reports in HELLO and INFO: the command semantics it follows, so that
/// clients which gate features on a version treat it as a modern server. keel's own version is in
/// `INFO server` as `keel_version`.
pub const REDIS_COMPAT_VERSION: &str = "7.0.0";

/// What local commands may ask about the node. The runtime implements it; `status` is called only
/// by INFO and RAFT.STATUS.
pub trait NodeInfo {
    fn status(&self) -> NodeStatus;
}

/// What to do with a request after [`ClientConnection::dispatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Answered locally: send it.
    Reply(Reply),
    /// Send the reply, then close the connection (QUIT).
    ReplyAndClose(Reply),
    /// Propose it to the log with this connection's request id.
    Write(WriteCommand),
    /// Serve it linearizably.
    Read(ReadCommand),
    /// For the runtime.
    Admin(AdminCommand),
}

/// Per-connection state: id, protocol version, name, library info.
#[derive(Clone, Debug)]
pub struct ClientConnection {
    id: u64,
    peer_addr: String,
    protocol: ProtocolVersion,
    name: Option<Bytes>,
    lib_name: Option<Bytes>,
    lib_version: Option<Bytes>,
    limits: Limits,
}

impl ClientConnection {
    /// `id` is unique per node (CLIENT ID, HELLO's `id`); `limits` are reported by CONFIG GET.
    pub fn new(id: u64, peer_addr: impl Into<String>, limits: Limits) -> Self {
        ClientConnection {
            id,
            peer_addr: peer_addr.into(),
            protocol: ProtocolVersion::Resp2,
            name: None,
            lib_name: None,
            lib_version: None,
            limits,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn protocol(&self) -> ProtocolVersion {
        self.protocol
    }

    pub fn name(&self) -> Option<&Bytes> {
        self.name.as_ref()
    }

    /// Appends `reply` in this connection's protocol version.
    pub fn encode(&self, reply: &Reply, out: &mut BytesMut) {
        encode(reply, self.protocol, out);
    }

    /// Parses a request and answers it if it is local. `args` must not be empty (the server
    /// ignores empty frames without a reply, as Redis does).
    pub fn dispatch(&mut self, args: &[Bytes], node: &dyn NodeInfo) -> Dispatch {
        match Command::parse(args) {
            Err(error) => Dispatch::Reply(error.to_reply()),
            Ok(Command::Write(command)) => Dispatch::Write(command),
            Ok(Command::Read(command)) => Dispatch::Read(command),
            Ok(Command::Admin(command)) => Dispatch::Admin(command),
            Ok(Command::Local(LocalCommand::Quit)) => Dispatch::ReplyAndClose(Reply::OK),
            Ok(Command::Local(command)) => Dispatch::Reply(self.answer(command, node)),
        }
    }

    fn answer(&mut self, command: LocalCommand, node: &dyn NodeInfo) -> Reply {
        match command {
            LocalCommand::Ping(None) => Reply::PONG,
            LocalCommand::Ping(Some(message)) | LocalCommand::Echo(message) => Reply::Bulk(message),
            LocalCommand::Hello(hello) => self.hello(hello),
            LocalCommand::Command(query) => introspection::command_reply(&query),
            LocalCommand::Client(client) => self.client(client),
            LocalCommand::ConfigGet(patterns) => introspection::config_get(&patterns, &self.limits),
            LocalCommand::Select => Reply::OK,
            LocalCommand::Quit => Reply::OK,
            LocalCommand::Info(sections) => Reply::text(info::render(&node.status(), &sections)),
            LocalCommand::RaftStatus => Reply::text(info::render_raft(&node.status())),
        }
    }

    fn hello(&mut self, hello: HelloArgs) -> Reply {
        if let Some((user, _password)) = &hello.auth {
            // No passwords yet (client AUTH comes with the security step): like a Redis whose
            // default user has `nopass`, any password is accepted for "default", nothing else.
            if user.as_ref() != b"default" {
                return Reply::error(
                    "WRONGPASS invalid username-password pair or user is disabled.",
                );
            }
        }
        if let Some(version) = hello.protover {
            self.protocol = version;
        }
        if let Some(name) = hello.setname {
            self.set_name(name);
        }
        let field = |k: &'static str, v: Reply| (Reply::text(k), v);
        Reply::Map(vec![
            field("server", Reply::text("keel")),
            field("version", Reply::text(REDIS_COMPAT_VERSION)),
            field("proto", Reply::Integer(self.protocol.number())),
            field("id", Reply::Integer(self.id as i64)),
            // "cluster" would make clients speak Redis Cluster (slots, MOVED); keel is one logical
            // server, so "standalone".
            field("mode", Reply::text("standalone")),
            // Every keel node accepts writes (followers forward them), so to a client every node
            // is a master.
            field("role", Reply::text("master")),
            field("modules", Reply::Array(Vec::new())),
        ])
    }

    fn set_name(&mut self, name: Bytes) {
        self.name = (!name.is_empty()).then_some(name);
    }

    fn client(&mut self, command: ClientCommand) -> Reply {
        match command {
            ClientCommand::SetName(name) => {
                self.set_name(name);
                Reply::OK
            }
            ClientCommand::GetName => match &self.name {
                Some(name) => Reply::Bulk(name.clone()),
                None => Reply::Null,
            },
            ClientCommand::SetInfo { attribute, value } => {
                let slot = match attribute {
                    ClientAttribute::LibName => &mut self.lib_name,
                    ClientAttribute::LibVersion => &mut self.lib_version,
                };
                *slot = (!value.is_empty()).then_some(value);
                Reply::OK
            }
            ClientCommand::Id => Reply::Integer(self.id as i64),
            ClientCommand::Info => Reply::text(self.client_line()),
        }
    }

    /// A `CLIENT INFO` line, with the fields of Redis's that mean something here.
    fn client_line(&self) -> String {
        let text = |b: &Option<Bytes>| {
            b.as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        format!(
            "id={} addr={} name={} db=0 user=default lib-name={} lib-ver={} resp={}\n",
            self.id,
            self.peer_addr,
            text(&self.name),
            text(&self.lib_name),
            text(&self.lib_version),
            self.protocol.number(),
        )
    }
}

#[cfg(test)]
mod tests;
