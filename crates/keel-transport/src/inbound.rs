//! The accepting side of the peer transport: the handshake checks (and, with a cluster secret,
//! the authentication) of every inbound connection, then its messages or snapshot, and the
//! refusal a failed connection is told.
//!
//! Bounds: at most `TransportConfig::inbound_connections_max` (1,024) connections open, and at
//! most `handshakes_pending_max` (64) still in their handshake; a new one past that closes the
//! oldest pending one, so connections that never finish their handshake cannot crowd out a
//! member's.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::{sleep, timeout};

use super::record::{FrameWriter, RecordReader};
use super::{
    auth, read_frame, record_to_responder_bytes_max, report_persist_error, snapshot, ConnReader,
    ConnWriter, Inbound, Shared, TransportError,
};
use crate::wire::{self, AuthError, Body, Channel};
use keel_engine::handshake::{Admission, PeerHello, Refusal};

/// Tells a refused peer why (sealed, if the connection authenticated), then closes without
/// resetting the connection: the write side is shut down and what the peer still sends is read
/// and dropped until it closes too (bounded), so unread data does not turn the close into a
/// reset that could discard the reason.
async fn send_refusal(rd: &mut ConnReader, wr: &mut ConnWriter, error: &TransportError) {
    if matches!(error, TransportError::Io(_) | TransportError::Timeout(_)) {
        return; // the connection is not usable, or the peer said nothing at all
    }
    wr.discard();
    wire::encode_refusal(&error.wire_reason(), wr.buf());
    let tell = async {
        wr.send().await?;
        wr.shutdown().await?;
        let mut sink = [0u8; 4096];
        while rd.get_mut().read(&mut sink).await? > 0 {}
        Ok::<(), io::Error>(())
    };
    let _ = timeout(Duration::from_secs(1), tell).await;
}

/// The inbound connections still in their handshake, oldest first (ids in accept order).
#[derive(Default)]
struct Handshaking {
    by_id: BTreeMap<u64, AbortHandle>,
}

type SharedHandshaking = Arc<Mutex<Handshaking>>;

fn lock(handshaking: &SharedHandshaking) -> std::sync::MutexGuard<'_, Handshaking> {
    // Every critical section is one map operation: a panic cannot leave it half done.
    handshaking.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection's place among those in their handshake, given up when the handshake is over
/// (or the connection ends).
struct HandshakeSlot {
    handshaking: SharedHandshaking,
    id: u64,
}

impl HandshakeSlot {
    fn done(&self) {
        lock(&self.handshaking).by_id.remove(&self.id);
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.done();
    }
}

pub(super) async fn accept_loop(
    shared: Arc<Shared>,
    listener: TcpListener,
    inbound: mpsc::Sender<Inbound>,
) {
    // Connections live in this set so that aborting the listener ends them all.
    let mut connections = JoinSet::new();
    let handshaking = SharedHandshaking::default();
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if connections.len() >= shared.config.inbound_connections_max {
                        shared.refused_connections.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%peer, "closing peer connection: too many open");
                        continue;
                    }
                    let shared = shared.clone();
                    let inbound = inbound.clone();
                    next_id += 1;
                    let slot = HandshakeSlot { handshaking: handshaking.clone(), id: next_id };
                    // Held while the task is registered, so its slot cannot be given up before
                    // it is taken.
                    let mut pending = lock(&handshaking);
                    if pending.by_id.len() >= shared.config.handshakes_pending_max {
                        if let Some((_, oldest)) = pending.by_id.pop_first() {
                            shared.refused_connections.fetch_add(1, Ordering::Relaxed);
                            oldest.abort();
                        }
                    }
                    let task = connections.spawn(async move {
                        let _ = stream.set_nodelay(true);
                        let (rd, wr) = stream.into_split();
                        let mut rd = RecordReader::plain(BufReader::new(rd));
                        let mut wr = FrameWriter::plain(wr);
                        let served = serve_connection(&shared, &mut rd, &mut wr, inbound, &slot);
                        if let Err(e) = served.await {
                            // Counted before the stream is dropped, so whoever sees the close
                            // also sees the count.
                            shared.refused_connections.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(%peer, "closing peer connection: {e}");
                            send_refusal(&mut rd, &mut wr, &e).await;
                        }
                    });
                    pending.by_id.insert(next_id, task);
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!("accept failed: {e}");
                    sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

#[expect(clippy::too_many_lines)]
async fn serve_connection(
    shared: &Shared,
    rd: &mut ConnReader,
    wr: &mut ConnWriter,
    inbound: mpsc::Sender<Inbound>,
    slot: &HandshakeSlot,
) -> Result<(), TransportError> {
    let c = &shared.config;
    let limit = Duration::from_millis(c.handshake_timeout_ms);
    let first = timeout(limit, auth::read_hello(rd))
        .await
        .map_err(|_| TransportError::Timeout("handshake"))??;
    let (raw, hello) = match first {
        None => return Ok(()),
        Some((raw, Body::Handshake(h))) => (raw, h),
        Some(_) => return Err(TransportError::Unexpected("frame before the handshake")),
    };
    hello.check_required_flags()?;
    match &c.cluster_secret {
        Some(secret) => {
            let max = record_to_responder_bytes_max(c, hello.channel);
            auth::respond(secret, &hello, &raw, c.node_id, rd, wr, limit, max).await?;
        }
        None if hello.flags & wire::FLAG_AUTHENTICATED != 0 => {
            return Err(AuthError::NotConfigured.into())
        }
        None => {}
    }
    // From here on the peer is authenticated (when this node has a secret): only now is
    // anything its handshake says believed or adopted, by keel-engine's gate.
    let peer = PeerHello {
        cluster_id: hello.cluster_id,
        node_id: hello.node_id,
        incarnation: hello.incarnation()?,
        advertised_addr: hello.advertised_addr()?,
        client_addr: hello.client_addr()?,
    };
    let admitted = {
        let mut gate = shared.gate.lock().expect("gate lock");
        let admitted = gate.admit(&peer);
        report_persist_error(&mut gate);
        admitted
    };
    // A peer back with other storage: only what promises nothing is heard from it (the gate's
    // `hears_message`); its first other message is refused with the reason.
    slot.done();
    let (admission, changed_storage) = match admitted {
        Ok(admission) => (admission, None),
        Err(refusal @ Refusal::StorageChanged { got, .. }) => {
            tracing::warn!(
                node = c.node_id,
                peer = hello.node_id,
                "{refusal}: only what promises nothing is heard from it"
            );
            (Admission::default(), Some((got, refusal)))
        }
        Err(refusal) => return Err(refusal.into()),
    };
    match hello.channel {
        Channel::Messages => {
            if let Some(addr) = admission.client_addr {
                if shared.client_addrs.set(hello.node_id, &addr) {
                    tracing::info!(
                        node = c.node_id,
                        peer = hello.node_id,
                        client_addr = %addr,
                        "learned a client address from a handshake"
                    );
                }
            }
            if let Some(addr) = admission.peer_addr {
                let learned = Inbound::PeerAddress {
                    from: hello.node_id,
                    addr,
                };
                if inbound.send(learned).await.is_err() {
                    return Ok(());
                }
            }
            let mut reassembly = wire::Reassembly::default();
            loop {
                let (group, msg) = match read_frame(rd, c.frame_size_bytes_max).await? {
                    None => return Ok(()),
                    Some(Body::Message(group, msg)) => (group, msg),
                    // Promises nothing, so heard from a peer with changed storage too.
                    Some(Body::NodeMessage(message)) => {
                        let from = hello.node_id;
                        if inbound
                            .send(Inbound::NodeMessage { from, message })
                            .await
                            .is_err()
                        {
                            return Ok(());
                        }
                        continue;
                    }
                    Some(Body::MessagePart(part)) => {
                        match reassembly.add(part, c.message_size_bytes_max)? {
                            None => continue,
                            Some(body) => match wire::decode_body(body)? {
                                Body::Message(group, msg) => (group, msg),
                                _ => {
                                    return Err(TransportError::Unexpected(
                                        "parts of a non-message",
                                    ))
                                }
                            },
                        }
                    }
                    Some(_) => return Err(TransportError::Unexpected("non-message frame")),
                };
                if msg.from != hello.node_id {
                    return Err(TransportError::Unexpected("message from another node id"));
                }
                if let Some((incarnation, refusal)) = &changed_storage {
                    let mut gate = shared.gate.lock().expect("gate lock");
                    let heard = gate.hears_message(hello.node_id, *incarnation, &msg.body);
                    report_persist_error(&mut gate);
                    if !heard {
                        return Err(refusal.clone().into());
                    }
                }
                let message = Inbound::Message {
                    group,
                    message: msg,
                };
                if inbound.send(message).await.is_err() {
                    return Ok(()); // the node is gone
                }
            }
        }
        Channel::Snapshot => {
            if hello.flags & wire::FLAG_CHUNKED_SNAPSHOT == 0 {
                return Err(TransportError::Refused(
                    "snapshot connection without chunked transfer (one-frame transfer retired)",
                ));
            }
            snapshot::receive(
                c,
                &shared.receiver,
                &shared.snapshots,
                &shared.snapshot_floor,
                hello.node_id,
                rd,
                wr,
                &inbound,
            )
            .await
        }
    }
}
