//! The authentication step of a connection's handshake, over a socket (the exchange itself is
//! `wire::auth`), and the cluster secret file.
//!
//! A node with a cluster secret authenticates every connection both ways before it reads a Raft
//! message or a snapshot frame, and before it adopts anything the peer's handshake announces
//! (peer address, client address, storage incarnation). Afterwards both directions are sealed
//! records (`record.rs`).
//!
//! The secret is `TransportConfig::cluster_secret`, read from a file by [`load_cluster_secret`]
//! (the server's `--cluster-secret-file`). Without a secret, the authentication step and the
//! record layer pass bytes through unchanged.

use std::io;
use std::path::Path;
use std::time::Duration;

use keel_core::NodeId;
use rand::rngs::OsRng;
use rand::TryRngCore;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::timeout;

use super::record::{FrameWriter, RecordReader};
use super::{read_frame, read_frame_raw, TransportError, HANDSHAKE_FRAME_BYTES_MAX};
use crate::wire::auth::{Initiator, Responder, NONCE_BYTES};
use crate::wire::{self, AuthError, Body, ClusterSecret, Handshake};

/// Bound on the challenge and response frames (a few dozen bytes; a refusal may come instead).
const AUTH_FRAME_BYTES_MAX: u32 = 2048;

/// A fresh nonce from the operating system's generator.
pub(super) fn draw_nonce() -> io::Result<[u8; NONCE_BYTES]> {
    let mut nonce = [0u8; NONCE_BYTES];
    OsRng
        .try_fill_bytes(&mut nonce)
        .map_err(|e| io::Error::other(format!("no randomness from the OS: {e}")))?;
    Ok(nonce)
}

/// Reads a cluster secret file: its bytes, less one trailing newline (`\n` or `\r\n`), at least
/// `wire::auth::SECRET_BYTES_MIN` of them. On Unix a file that others may read or write is
/// refused: the secret is the cluster's only key.
pub fn load_cluster_secret(path: &Path) -> Result<ClusterSecret, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o007 != 0 {
            return Err(format!(
                "{}: other users may access it (mode {:o}); make it readable by this user only \
                 (chmod 600)",
                path.display(),
                mode & 0o777
            ));
        }
    }
    if meta.len() > wire::auth::SECRET_BYTES_MAX as u64 + 2 {
        return Err(format!(
            "{}: {} bytes is too long for a secret (at most {})",
            path.display(),
            meta.len(),
            wire::auth::SECRET_BYTES_MAX
        ));
    }
    let bytes =
        std::fs::read(path).map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    let trimmed = match bytes.strip_suffix(b"\n") {
        Some(rest) => rest.strip_suffix(b"\r").unwrap_or(rest),
        None => &bytes,
    };
    ClusterSecret::new(trimmed).map_err(|e| format!("{}: {e}", path.display()))
}

/// The connecting side: sends the authenticated handshake, checks the responder's proof (it must
/// be `expected`), answers with this side's proof and keys both directions.
pub(super) async fn initiate<R, W>(
    secret: &ClusterSecret,
    hello: Handshake,
    expected: NodeId,
    rd: &mut RecordReader<R>,
    wr: &mut FrameWriter<W>,
    limit: Duration,
    record_bytes_max: u32,
) -> Result<(), TransportError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let initiator = Initiator::new(secret.clone(), hello, draw_nonce()?, expected);
    wire::encode_handshake_body(initiator.hello_body(), wr.buf());
    wr.send().await?;
    let answer = timeout(limit, read_frame(rd, AUTH_FRAME_BYTES_MAX))
        .await
        .map_err(|_| TransportError::Timeout("authentication challenge"))??;
    let challenge = match answer {
        Some(Body::AuthChallenge(c)) => c,
        // Unauthenticated (nothing is before the keys exist): it is only logged.
        Some(Body::Refusal(reason)) => return Err(TransportError::RefusedByPeer(reason)),
        None => return Err(TransportError::Io(io::ErrorKind::UnexpectedEof.into())),
        Some(_) => {
            return Err(TransportError::Unexpected(
                "frame instead of an authentication challenge",
            ))
        }
    };
    let (response, keys) = initiator.on_challenge(&challenge)?;
    wire::encode_response(&response, wr.buf());
    wr.send().await?;
    wr.seal(keys.to_responder);
    rd.seal(keys.to_initiator, record_bytes_max);
    Ok(())
}

/// The accepting side, after the handshake `hello` (received as `hello_body`): challenges the
/// peer, checks its proof and keys both directions. Nothing the peer said is trusted before this
/// returns `Ok`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn respond<R, W>(
    secret: &ClusterSecret,
    hello: &Handshake,
    hello_body: &[u8],
    own_id: NodeId,
    rd: &mut RecordReader<R>,
    wr: &mut FrameWriter<W>,
    limit: Duration,
    record_bytes_max: u32,
) -> Result<(), TransportError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let responder = Responder::new(secret.clone(), hello, hello_body, own_id, draw_nonce()?)?;
    wire::encode_challenge(responder.challenge(), wr.buf());
    wr.send().await?;
    let answer = timeout(limit, read_frame_raw(rd, AUTH_FRAME_BYTES_MAX))
        .await
        .map_err(|_| TransportError::Timeout("authentication response"))??;
    let Some(raw) = answer else {
        return Err(TransportError::Io(io::ErrorKind::UnexpectedEof.into()));
    };
    // Anything but a response (a Raft message, a snapshot offer) skips the proof: refused
    // before it is even decoded.
    if raw.first() != Some(&wire::auth::BODY_AUTH_RESPONSE) {
        return Err(AuthError::Required.into());
    }
    let Body::AuthResponse(response) = wire::decode_body(raw)? else {
        unreachable!("the body kind was checked");
    };
    let keys = responder.on_response(&response)?;
    rd.seal(keys.to_responder, record_bytes_max);
    wr.seal(keys.to_initiator);
    Ok(())
}

/// Reads the handshake frame: its raw body (an authenticating responder needs the exact bytes)
/// and its decoding.
pub(super) async fn read_hello<R: AsyncRead + Unpin>(
    rd: &mut R,
) -> Result<Option<(bytes::Bytes, Body)>, TransportError> {
    let Some(raw) = read_frame_raw(rd, HANDSHAKE_FRAME_BYTES_MAX).await? else {
        return Ok(None);
    };
    let body = wire::decode_body(raw.clone())?;
    Ok(Some((raw, body)))
}

#[cfg(test)]
mod tests;
