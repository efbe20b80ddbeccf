//! Node messages (body kind 12): an application's own bytes, sent by one node to its peers on the
//! message connections beside the Raft messages, never through the log (format in the module
//! documentation of `wire`, "Node message").

use bytes::Bytes;

use super::codec::Reader;
use super::frame::put_frame;
use super::{WireError, MESSAGE_PART_BYTES};

/// Body kind of a node message.
pub const BODY_NODE_MESSAGE: u8 = 12;

/// The largest node message, in bytes: its body (the kind byte and the bytes) fits in one frame
/// of at most [`MESSAGE_PART_BYTES`], so a node message never goes out in parts and never holds
/// a connection longer than one part of a large Append does.
pub const NODE_MESSAGE_BYTES_MAX: usize = MESSAGE_PART_BYTES - 1;

/// Appends `message` as a node message frame to `out`. The caller checks the bound
/// ([`NODE_MESSAGE_BYTES_MAX`]); a longer message would be refused by every receiver.
pub fn encode_node_message(message: &[u8], out: &mut Vec<u8>) {
    debug_assert!(message.len() <= NODE_MESSAGE_BYTES_MAX);
    put_frame(out, |b| {
        b.push(BODY_NODE_MESSAGE);
        b.extend_from_slice(message);
    });
}

/// The bytes of a node message body (after its kind): the rest of the body, at most
/// [`NODE_MESSAGE_BYTES_MAX`].
pub(super) fn decode_node_message(r: &mut Reader) -> Result<Bytes, WireError> {
    let len = r.remaining();
    if len > NODE_MESSAGE_BYTES_MAX {
        return Err(WireError::Oversize {
            len_bytes: len as u64,
            bytes_max: NODE_MESSAGE_BYTES_MAX as u64,
        });
    }
    Ok(r.bytes(len, "node message")?)
}
