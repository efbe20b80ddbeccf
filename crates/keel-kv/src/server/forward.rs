//! Forwarding a client's request to the leader's client port and relaying the reply.
//!
//! One lazily opened connection per client connection (so the leader sees the requests of one
//! client in order), named [`super::FORWARD_CLIENT_NAME`] so that the leader never forwards them
//! again. A forward that fails before anything was sent is definitely not applied; one that fails
//! after sending a write has an unknown outcome and is never resent.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::FORWARD_CLIENT_NAME;
use crate::resp::{encode_request, parse_reply, Limits, Reply};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longer than the runtime's request timeout, so the leader's own answer (`-TRYAGAIN outcome
/// unknown`) normally arrives first.
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Default)]
pub(super) struct Forwarder {
    link: Option<Link>,
}

struct Link {
    leader: u64,
    stream: TcpStream,
    input: BytesMut,
}

#[derive(Debug)]
enum Failure {
    /// Nothing was sent: the request was not applied.
    NotSent(String),
    /// Sent, no reply: it may have been applied.
    Unknown(String),
}

impl Forwarder {
    pub(super) async fn forward(
        &mut self,
        leader: u64,
        addr: &str,
        args: &[Bytes],
        is_write: bool,
        limits: &Limits,
    ) -> Reply {
        match self.try_forward(leader, addr, args, limits).await {
            Ok(reply) => reply,
            Err(failure) => {
                self.link = None;
                match failure {
                    Failure::NotSent(why) => Reply::error(format!(
                        "TRYAGAIN leader is node {leader} at {addr}, not reachable: {why}"
                    )),
                    Failure::Unknown(_) if is_write => Reply::error("TRYAGAIN outcome unknown"),
                    Failure::Unknown(why) => Reply::error(format!(
                        "TRYAGAIN forwarding to leader {leader} failed: {why}"
                    )),
                }
            }
        }
    }

    async fn try_forward(
        &mut self,
        leader: u64,
        addr: &str,
        args: &[Bytes],
        limits: &Limits,
    ) -> Result<Reply, Failure> {
        if self.link.as_ref().is_none_or(|l| l.leader != leader) {
            self.link = None;
            let stream = timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
                .await
                .map_err(|_| Failure::NotSent("connect timed out".into()))?
                .map_err(|e| Failure::NotSent(e.to_string()))?;
            let _ = stream.set_nodelay(true);
            let mut link = Link {
                leader,
                stream,
                input: BytesMut::new(),
            };
            let reply = link
                .round_trip(
                    &[
                        Bytes::from_static(b"CLIENT"),
                        Bytes::from_static(b"SETNAME"),
                        Bytes::from_static(FORWARD_CLIENT_NAME.as_bytes()),
                    ],
                    limits,
                )
                .await
                .map_err(Failure::NotSent)?;
            if reply.is_error() {
                return Err(Failure::NotSent(format!("{reply:?}")));
            }
            self.link = Some(link);
        }
        let link = self.link.as_mut().expect("link opened above");
        link.round_trip(args, limits)
            .await
            .map_err(Failure::Unknown)
    }
}

impl Link {
    async fn round_trip(&mut self, args: &[Bytes], limits: &Limits) -> Result<Reply, String> {
        let mut request = BytesMut::new();
        encode_request(args, &mut request);
        self.stream
            .write_all(&request)
            .await
            .map_err(|e| e.to_string())?;
        timeout(REPLY_TIMEOUT, async {
            loop {
                if let Some((reply, used)) =
                    parse_reply(&self.input, limits).map_err(|e| e.to_string())?
                {
                    self.input.advance(used);
                    return Ok(reply);
                }
                if self
                    .stream
                    .read_buf(&mut self.input)
                    .await
                    .map_err(|e| e.to_string())?
                    == 0
                {
                    return Err("the leader closed the connection".to_string());
                }
            }
        })
        .await
        .map_err(|_| "no reply in time".to_string())?
    }
}
