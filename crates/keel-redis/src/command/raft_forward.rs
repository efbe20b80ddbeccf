//! `RAFT.FORWARD <client-id> <seq>`: the request id a follower assigned to the write it forwards,
//! sent to the leader on the follower's forwarding connection just before that write.
//!
//! ```text
//! write         RAFT.FORWARD <client-id> <seq>   +OK
//!               <the write, as the client sent it>      its reply
//! transaction   MULTI                                   +OK
//!               <each queued request>                   +QUEUED
//!               RAFT.FORWARD <client-id> <seq>          +OK
//!               EXEC                                    EXEC's reply
//! ```
//!
//! The id is a prefix, not a wrapper around the write, so that the write crosses to the leader
//! byte for byte as the follower accepted it: a request within the follower's `Limits` (argument
//! count, request bytes) is within the leader's, and its log entry is as large as a local
//! proposal's (the id takes the same 16 bytes whoever assigned it). A leader built before this
//! command answers it `-ERR unknown command`; the follower then relays what the write answered
//! and never sends it again (`forwarding::ForwardedWrite::on_id_refused`).
//!
//! Who may send it: only a connection that named itself `keel-forward` (`CLIENT SETNAME`, which
//! needs `AUTH` first wherever `requirepass` is set, as every command does); anywhere else it is
//! an unknown command, as if it did not exist. It lets the sender choose a dedup session, which
//! takes nothing from anyone who could not write anyway: the sessions are random 64-bit ids that
//! no reply shows (`CLIENT ID`, `CLIENT INFO` and `HELLO` show the connection's number), so no
//! client can land its writes in another's session, or refuse that session's writes by pushing
//! its seq ahead, without guessing the id.
//!
//! The id applies to the request right after it, which must be a write (an `EXEC` inside a
//! transaction); anything else is refused with an error and not run, and the id dropped. The
//! leader answers the write as it answers any, under that id: a write whose id it applied before
//! is answered with the remembered reply and not applied again.

use bytes::Bytes;

use super::{CommandClass, CommandError, CommandSpec};
use crate::RequestId;
use keel_resp::number::parse_u64;

/// The command's name (case-insensitive).
pub const FORWARD: &str = "RAFT.FORWARD";

/// The name a forwarding connection gives itself (`CLIENT SETNAME`): only there may `RAFT.FORWARD`
/// be sent, and a node never forwards a request that arrived on such a connection again (no
/// forwarding loops while leadership moves).
pub const FORWARD_CLIENT_NAME: &str = "keel-forward";

/// Whether `args` is a `RAFT.FORWARD` request (its arguments unchecked).
pub fn is_forward(args: &[Bytes]) -> bool {
    args.first()
        .is_some_and(|name| name.eq_ignore_ascii_case(FORWARD.as_bytes()))
}

/// The request id of a `RAFT.FORWARD` request: a client id (any `u64`) and a seq (from 1, as a
/// connection numbers its writes), both in Redis's strict decimal.
pub fn parse_forward(args: &[Bytes]) -> Result<RequestId, CommandError> {
    let [_, client_id, seq] = args else {
        return Err(CommandError::WrongArity(FORWARD.to_ascii_lowercase()));
    };
    let client_id = parse_u64(client_id).ok_or(CommandError::Forward(
        "the client id is not an unsigned 64-bit integer",
    ))?;
    let seq = parse_u64(seq)
        .filter(|&seq| seq > 0)
        .ok_or(CommandError::Forward(
            "the seq is not a positive 64-bit integer",
        ))?;
    Ok(RequestId { client_id, seq })
}

/// The `RAFT.FORWARD` request that gives `id` to the write sent right after it.
pub fn forward_request(id: RequestId) -> [Bytes; 3] {
    [
        Bytes::from_static(FORWARD.as_bytes()),
        Bytes::from(id.client_id.to_string()),
        Bytes::from(id.seq.to_string()),
    ]
}

/// Appends the `RAFT.FORWARD` request of `id` to `out`, encoded: the bytes of
/// [`forward_request`]'s, without allocating (a follower sends one per forwarded write).
pub fn encode_forward_request(id: RequestId, out: &mut bytes::BytesMut) {
    use keel_resp::{put_array_header, put_bulk, put_decimal_bulk};
    put_array_header(out, 3);
    put_bulk(out, FORWARD.as_bytes());
    put_decimal_bulk(out, id.client_id);
    put_decimal_bulk(out, id.seq);
}

/// Whether `args` may take the id of the `RAFT.FORWARD` before it: a write, or in a transaction
/// (`in_transaction`) its `EXEC`. Checked by name, before the request runs; a write with bad
/// arguments is refused when it is parsed, as anywhere.
pub fn may_follow_forward(args: &[Bytes], in_transaction: bool) -> Result<(), CommandError> {
    let name = args.first().map_or(&b""[..], |name| name.as_ref());
    if is_forward(args) {
        return Err(CommandError::Forward(
            "nested: a request id is already waiting for its write",
        ));
    }
    let takes_id = if in_transaction {
        name.eq_ignore_ascii_case(b"exec")
    } else {
        CommandSpec::lookup(name).is_some_and(|spec| spec.class == CommandClass::Write)
    };
    if takes_id {
        Ok(())
    } else if in_transaction {
        Err(CommandError::Forward(
            "inside a transaction only EXEC may follow it",
        ))
    } else {
        Err(CommandError::Forward("only a write may follow it"))
    }
}
