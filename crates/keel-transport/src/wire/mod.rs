//! The peer wire format, protocol version 7 (snapshot channel version 3, authentication by handshake
//! flag bit 1): frames, the handshake, peer authentication, and a hand-written encoding of every
//! [`keel_core::Message`] (docs/DESIGN.md sections 5 and 7: explicit encodings, never a serde format
//! whose layout can drift).
//!
//! All integers are little-endian. Checksums are CRC32C (Castagnoli).
//!
//! # Frame
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    4 | body length `L` in bytes (u32)                                     |
//! |      4 |    4 | CRC32C of the body                                                 |
//! |      8 |    L | body                                                               |
//!
//! `L` is checked against the receiver's configured maximum *before* anything is allocated for
//! the body (default [`FRAME_SIZE_BYTES_MAX_DEFAULT`]), so a hostile length cannot exhaust memory.
//! The first body byte is the body kind:
//!
//! | kind | body                                  | sent on                                  |
//! |-----:|---------------------------------------|------------------------------------------|
//! |    1 | handshake                             | first frame of every connection          |
//! |    2 | one Raft message                      | message connections                      |
//! |    3 | (retired: the one-frame snapshot of version 1) | refused                        |
//! |  4–7 | snapshot offer, position, chunk header, ack | snapshot connections (see below) |
//! |    8 | refusal                               | back to the connecting side, then close  |
//! |    9 | authentication challenge              | accepting side, after an authenticated handshake |
//! |   10 | authentication response               | connecting side, after the challenge     |
//! |   11 | one part of a Raft message            | message connections (see "Message parts") |
//! |   12 | a node message (the application's bytes) | message connections (see "Node message") |
//!
//! # Refusal (body kind 8)
//!
//! `kind u8 = 8`, `reason length u16` (at most [`REFUSAL_REASON_BYTES_MAX`]), the reason in UTF-8.
//! The only frame the accepting side ever writes on a message connection (besides the
//! authentication challenge): when it refuses the connection (wrong cluster id, a storage
//! incarnation other than the one it knows, a frame it cannot decode, a failed authentication),
//! it says why before closing, so the refused node can log the reason itself (S37: "remove me and
//! add me back"). A build that predates this kind only sees an unknown body on a connection that
//! is closing anyway. A refusal never names the refusing cluster's id (a wrong one is named as
//! the peer's, "not this cluster's": whoever probes the port learns nothing that would pass the
//! check next time; the refusing node logs both ids), and a failed authentication is only
//! "authentication failed" (with "this node requires the cluster secret" or "this node has no
//! cluster secret" when one side has none). Before the keys exist a refusal is a plain frame, so
//! it is unauthenticated and only ever logged; after them it is sealed like every other frame.
//!
//! # Handshake (body kind 1)
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 1                                                       |
//! |      1 |    4 | magic `KEEL`                                                       |
//! |      5 |    2 | protocol version (u16, currently 7)                                |
//! |      7 |    1 | channel: 0 = Raft messages, 1 = snapshot transfer                  |
//! |      8 |    4 | flags (u32). Bits 0..16 are *required* features: a receiver refuses a bit it does not know. Bits 16..32 are optional and ignored when unknown. Bit 0: chunked snapshot transfer (set on, and required for, snapshot connections). Bit 1: authenticated (the sender has a cluster secret; see "Authentication"). Bit 16: the extension is a list of records. |
//! |     12 |    8 | cluster id (u64)                                                   |
//! |     20 |    8 | sender node id (u64, never 0)                                      |
//! |     28 |    2 | extension length `E` (u16, at most [`HANDSHAKE_EXTENSION_BYTES_MAX`]) |
//! |     30 |    E | extension bytes: opaque unless flag bit 16 is set                  |
//!
//! With flag bit 16 the extension is a sequence of records, each `type u8`, `length u16`, then
//! `length` bytes; a receiver skips types it does not know and refuses a list that does not parse.
//! Type 1: the sender's advertised peer address, UTF-8 `host:port` — how members that were not
//! told a new member's address (only the node that ran `RAFT.MEMBER ADD` was) learn it when that
//! member first connects to them. Type 2: the sender's storage incarnation, u64 LE — a random
//! number drawn when its data directory was created; a receiver that saw another incarnation of
//! that member refuses the connection (S37: a member whose disk was wiped and that restarts under
//! the same id has lost its votes and acknowledgements, and must not be heard until it is removed
//! and added back). Type 3: the sender's client address, UTF-8 `host:port` (a host name or an IP
//! address, at most [`CLIENT_ADDR_BYTES_MAX`] bytes, the port a number): where the application's
//! clients reach the sender. A leader connects to every member, so every member learns the
//! leader's client address and can forward to it or name it in a redirection. Type 4 (with flag
//! bit 1): the connecting side's handshake nonce, 32 random bytes.
//!
//! Magic and version are checked before anything else is parsed, because another version may lay
//! out the rest differently; then the required flags. A receiver that authenticates peers believes
//! and adopts nothing else the handshake says (cluster id, addresses, incarnation) before the
//! authentication below has succeeded.
//!
//! # Authentication (handshake flag bit 1)
//!
//! Nodes configured with the same cluster secret (at least 32 bytes) authenticate every
//! connection, message and snapshot channel alike, both ways, in its handshake, and then seal
//! every byte that follows. A build without authentication refuses the required flag ("unknown
//! required feature flags 0x2") instead of misreading what follows; a node with a secret refuses
//! a handshake without the flag, and a node without a secret refuses one with it. All values below
//! are HMAC-SHA256 (RFC 2104) or SHA-256; `||` is concatenation; labels are the ASCII strings
//! shown, without a terminator.
//!
//! ```text
//! initiator A (connects)                               responder B (accepts)
//!   Handshake: flag bit 1, record 4 = nonce_a    ───▶
//!                                                ◀───   Challenge: id_b, nonce_b, proof_b
//!   checks id_b (the node it meant to reach) and proof_b
//!   Response: proof_a                            ───▶   checks proof_a
//!   sealed records, key K_ab                     ───▶
//!                                                ◀───   sealed records, key K_ba
//! ```
//!
//! - `T = SHA-256("keel auth v1 transcript" || len(H) u32 || H || id_b u64 || nonce_b)`, where
//!   `H` is A's whole handshake body exactly as sent: body kind, magic, version, channel, flags,
//!   cluster id, id_a, and every extension record (nonce_a, addresses, incarnation). So the
//!   transcript binds the cluster id, both node ids, the channel, both fresh nonces and
//!   everything the handshake announces.
//! - `proof_b = HMAC(secret, "keel auth v1 responder proof" || T)`,
//!   `proof_a = HMAC(secret, "keel auth v1 initiator proof" || T)`: one label per role, so a
//!   proof sent back to its maker (reflection) never matches.
//! - `K_ab = HMAC(secret, "keel auth v1 key initiator to responder" || T)`,
//!   `K_ba = HMAC(secret, "keel auth v1 key responder to initiator" || T)`: one key per
//!   connection and direction.
//!
//! Proofs are compared in constant time. A is refused by B, before B reads anything else from it,
//! if proof_a does not match, or if anything but a response (a Raft message, a snapshot offer)
//! follows the challenge; it is not even decoded. A closes the connection itself if id_b is not the
//! node it meant to reach or proof_b does not match.
//!
//! ## Challenge (body kind 9, B → A), 73 bytes
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 9                                                       |
//! |      1 |    8 | id_b: the responder's node id (u64, never 0)                       |
//! |      9 |   32 | nonce_b (random)                                                   |
//! |     41 |   32 | proof_b                                                            |
//!
//! ## Response (body kind 10, A → B), 33 bytes
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 10                                                      |
//! |      1 |   32 | proof_a                                                            |
//!
//! ## Sealed records (after the response, both directions)
//!
//! Everything after the response is carried in records; a record's payload is a run of ordinary
//! frames (and, on snapshot connections, a chunk's raw data after its header frame), so the
//! frame formats above do not change:
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    4 | payload length `R` (u32), checked against the receiver's bound before anything is allocated |
//! |      4 |   16 | tag: the first 16 bytes of `HMAC(K, seq u64 || payload)`           |
//! |     20 |    R | payload                                                            |
//!
//! `K` is the direction's key and `seq` the number of records sent before it in that direction
//! (from 0; never sent). Nothing of a record is handed on before its whole tag matched; a
//! mismatch closes the connection. A sender writes one record per batch of frames: it stops
//! adding frames to a record once the payload holds [`auth::RECORD_FILL_BYTES`] (256 KiB), so a
//! receiver bounds a record by its frame bound + 8 + 256 KiB on message connections and by its
//! chunk bound + 8 + 256 on snapshot connections (a chunk header and its data are one record);
//! what the accepting side writes (refusals, positions, acks) is one frame per record.
//!
//! ## Threat model
//!
//! Against an attacker that can reach the peer port or sits on the path, reading, injecting,
//! altering, dropping, delaying, replaying or redirecting bytes, but does not know the secret:
//!
//! - it cannot connect as a member: it cannot compute proof_a for B's fresh nonce_b, and B
//!   hears nothing from it (not a message, not an address) before that proof;
//! - it cannot impersonate a member to a connecting node: proof_b covers A's fresh nonce_a
//!   and names id_b;
//! - it cannot replay a recorded handshake (fresh nonces on both sides), reflect a proof or a
//!   record to its sender (one label per role, one key per direction), relay a connection to
//!   another member than the one meant (id_b is checked and bound) or to another channel or
//!   cluster (both in `T`);
//! - it cannot forge, alter, replay, reorder or cut records out of the middle of a connection
//!   (tag over the implicit sequence number), nor move records between connections (per-connection
//!   keys);
//! - it *can* drop or delay traffic, cut a connection (at any point, including after a whole
//!   record: Raft tolerates lost messages, a snapshot transfer resumes), inject a plain refusal
//!   before the keys exist (only logged; the node retries), and read everything: there is no
//!   confidentiality (TLS is its own feature, and the record layer sits on any byte stream, so a
//!   TLS stream can go underneath it). A connection that sends nothing, or half a record, holds
//!   a connection slot as before.
//!
//! Whoever knows the secret is a member as far as the transport is concerned; everything a member
//! sends still passes the node's message checks (`RaftNode::validate`).
//!
//! # Raft message (body kind 2)
//!
//! `kind u8 = 2`, `group u64` (the Raft group it belongs to, `keel_core::GroupId`: connections
//! are a node's, shared by the groups it hosts; a node drops a message of a group it does not
//! host, counted, and keeps the connection), `from u64`, `to u64`, `term u64`, `tag u8`, then per
//! tag:
//!
//! | tag | message            | fields                                                         |
//! |----:|--------------------|----------------------------------------------------------------|
//! |   1 | PreVote            | last log id                                                    |
//! |   2 | PreVoteResponse    | granted bool                                                   |
//! |   3 | RequestVote        | last log id, transfer bool                                     |
//! |   4 | VoteResponse       | granted bool                                                   |
//! |   5 | Append             | prev log id, commit u64, count u32, `count` entries            |
//! |   6 | AppendResponse     | result kind u8: 0 = success, match u64; 1 = conflict, rejected u64, hint term present bool, hint term u64 (0 when absent), hint index u64 |
//! |   7 | Heartbeat          | commit u64, read round u64, sent at ms u64, your offset present bool, your offset ms i64 (0 when absent); clock readings: see `keel_core::LeaderClock` |
//! |   8 | HeartbeatResponse  | read round u64, lagging bool, echoed sent at ms u64, answered at ms u64 |
//! |   9 | TimeoutNow         | nothing                                                        |
//! |  10 | InstallSnapshot    | snapshot meta                                                  |
//! |  11 | RepairRequest      | promised log id, last log id, count u32, `count` log ids: term starts, holds last bool (`keel_core::MessageBody::RepairRequest`) |
//! |  12 | RepairResponse     | answer kind u8: 0 = entries, prev log id, count u32, `count` entries; 1 = lacks, after log id; 2 = unknown; 3 = committed, through log id, membership; 4 = holds, after log id, through log id, membership |
//!
//! - log id: term u64, index u64.
//! - bool: one byte, 0 or 1 (anything else is refused).
//! - entry: term u64, index u64, payload kind u8 (0 noop, 1 normal, 2 membership), payload
//!   length u32, payload. A noop has length 0.
//! - membership: three sets — voters, outgoing voters, learners — each count u32 followed by
//!   `count` node ids u64.
//! - snapshot meta: last log id, membership, term history count u32, then (term u64, first
//!   index u64) per term.
//!
//! Every count is checked against the bytes that remain (times the smallest encoding of one
//! element) before a vector is allocated. A body must be consumed exactly: trailing bytes are an
//! error.
//!
//! # Message parts (body kind 11)
//!
//! A Raft message whose body (kind byte included) is longer than [`MESSAGE_PART_BYTES`]
//! (256 KiB) — an Append carrying a large entry — is sent as a run of parts, each a frame:
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 11                                                      |
//! |      1 |    4 | message length `M` (u32): the whole body's length                  |
//! |      5 |    4 | offset (u32) of this part's data in the body                       |
//! |      9 |  var | data: at least one byte, at most [`MESSAGE_PART_BYTES`], ending at or before `M` |
//!
//! The parts of one message are sent in order, offsets from 0 without gaps, and only one message
//! is in parts at a time on a connection; whole messages (body kind 2) may come between its
//! parts. That is the point: the sender writes one part at a time and lets every message queued
//! meanwhile that is not an Append or an InstallSnapshot (heartbeats, votes, responses) go out
//! before the next part, so a large Append never delays a heartbeat by more than one part's
//! write. Appends keep their order among themselves. The receiver checks `M` against its
//! message bound (`TransportConfig::message_size_bytes_max`) on the first part, before it
//! buffers anything, grows its buffer only as parts arrive, and decodes the completed body as
//! a body of kind 2. A part out of order, of another length, or a completed body of another kind
//! closes the connection. A receiver's frame bound must be at least
//! [`MESSAGE_FRAME_BYTES_MAX`], the largest frame a sender of this build writes on a message
//! connection.
//!
//! # Node message (body kind 12)
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 12                                                      |
//! |      1 |  var | the message: the rest of the body, 0 to [`NODE_MESSAGE_BYTES_MAX`] (256 KiB − 1) bytes |
//!
//! An application's own bytes from one node to a peer (keel-runtime's `Handle::send_node_message`;
//! keel's server carries Redis pub/sub in them). The sender is the node the connection's
//! handshake named; nothing else about it is on the wire. It travels on the message connection
//! like a Raft message, in the order sent (it is never sent in parts: its body fits one frame),
//! and is never written to a log: a message queued when the connection drops, or when either
//! node stops, is lost. A body longer than the bound is refused like any malformed frame (the
//! connection closes, counted).
//!
//! **Older peers.** Protocol version 7 added this kind. A node of version 6 refuses the
//! handshake of a version 7 node ("unsupported protocol version 7"), before any node message
//! could reach it, as every version change does: peers must speak one protocol version
//! (docs/embedding.md, "Upgrades"). Refusing the handshake, not ignoring the frame, is what an
//! older build can do: it treats an unknown body kind as garbage and closes the connection, and
//! it would do so at the first node message, in the middle of the Raft traffic; refused at the
//! handshake, the operator sees why at once, in both nodes' logs.
//!
//! # Snapshot channel (handshake channel 1, snapshot channel version 3)
//!
//! A snapshot travels on a connection of its own, so a large transfer never delays heartbeats or
//! Appends on the message connection. The handshake of such a connection sets the required flag
//! bit 0 ([`FLAG_CHUNKED_SNAPSHOT`]): a peer that predates chunked transfer refuses it with
//! "unknown required feature flags" instead of misreading it, and this build refuses a snapshot
//! connection without it (the one-frame transfer of version 1, body kind 3, is gone). After the
//! handshake, frames (the frame format above, CRC32C over each body) alternate as follows, all
//! integers little-endian:
//!
//! ```text
//! sender                                         receiver
//!   Offer(id, total length)            ───▶
//!                                      ◀───   Position(status, offset it durably holds)
//!   ChunkHeader(offset, len, crc) + len raw bytes ───▶   (up to a window of chunks in flight)
//!                                      ◀───   Ack(Accepted | Resend, received, durable)
//!   ... final ChunkHeader carries the whole length and CRC32C
//!                                      ◀───   Ack(Complete | Failed)
//! ```
//!
//! A snapshot id is the sending leader's term and the snapshot's last (index, term). The bytes
//! transferred are the sender's snapshot *file* (format `KEELSNAP`, see keel-wal's lib.rs:
//! header with meta and CRCs, then the state machine's data), so the receiver's completed
//! partial file becomes its snapshot file by a rename, and its own checksums are verified again
//! before the receiver's core ever hears of it.
//!
//! ## Offer (body kind 4, sender → receiver), 43 bytes
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 4                                                       |
//! |      1 |    2 | snapshot channel version (u16, currently 3; checked first)         |
//! |      3 |    8 | Raft group (u64, `keel_core::GroupId`) whose snapshot this is      |
//! |     11 |    8 | leader term (u64)                                                  |
//! |     19 |    8 | snapshot index (u64)                                               |
//! |     27 |    8 | snapshot term (u64)                                                |
//! |     35 |    8 | total length of the snapshot file in bytes (u64)                   |
//!
//! ## Position (body kind 5, receiver → sender), 26 bytes
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 5                                                       |
//! |      1 |    8 | snapshot index (u64)                                               |
//! |      9 |    8 | snapshot term (u64)                                                |
//! |     17 |    1 | status: 0 continue from offset; 1 refused, a transfer from a later leader term is in progress; 2 refused, larger than the receiver accepts; 3 not needed, the receiver's commit index is at or past the snapshot (or it just received it) |
//! |     18 |    8 | offset (u64): bytes of this snapshot the receiver holds durably; 0 for another snapshot (its partial file was discarded) |
//!
//! ## Chunk header (body kind 6, sender → receiver), 42 bytes (54 for the final chunk), then the data
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 6                                                       |
//! |      1 |    8 | leader term (u64)                                                  |
//! |      9 |    8 | snapshot index (u64)                                               |
//! |     17 |    8 | snapshot term (u64)                                                |
//! |     25 |    8 | offset of the chunk in the snapshot file (u64)                     |
//! |     33 |    4 | chunk length `N` (u32), checked against the receiver's maximum chunk size before anything is allocated |
//! |     37 |    4 | CRC32C of the `N` data bytes                                       |
//! |     41 |    1 | flags: bit 0 = final chunk; other bits must be 0                   |
//! |     42 |    8 | (final only) total length of the snapshot file (u64)               |
//! |     50 |    4 | (final only) CRC32C of the whole snapshot file                     |
//!
//! The frame is followed by exactly `N` raw data bytes (outside any frame: the chunk's own CRC
//! covers them). Because the length comes from a checksummed header, a corrupt data chunk does
//! not desynchronise the stream: the receiver refuses it and the connection carries on.
//!
//! ## Ack (body kind 7, receiver → sender), 34 bytes
//!
//! | offset | size | field                                                              |
//! |-------:|-----:|--------------------------------------------------------------------|
//! |      0 |    1 | body kind, 7                                                       |
//! |      1 |    8 | snapshot index (u64)                                               |
//! |      9 |    8 | snapshot term (u64)                                                |
//! |     17 |    1 | status: 0 accepted; 1 resend from `received` (bad chunk checksum or wrong offset; chunks already in flight after it are skipped without an answer); 2 complete (verified, durable, handed to the node); 3 failed (whole checksum or file verification failed, partial discarded) |
//! |     18 |    8 | received (u64): bytes written contiguously from the start          |
//! |     26 |    8 | durable (u64): bytes fsynced (what survives a receiver crash)      |
//!
//! ## Rules
//!
//! - The receiver keeps at most one partial snapshot (data file plus a small state file naming
//!   the snapshot id, the durable offset and the CRC32C of the durable prefix). An offer for the
//!   same (index, term) resumes from the durable offset, whichever leader sends it; an offer for
//!   another snapshot discards the partial file, unless the partial came from a leader of a later
//!   term (refused as stale).
//! - Chunks are sent in order; at most a window of unacknowledged chunks is in flight, so the
//!   sender holds a few chunks in memory, never the snapshot. A chunk longer than the receiver's
//!   maximum, a control frame over 256 bytes, or a bad frame checksum closes the connection (the
//!   sender reconnects and resumes from the durable offset).
//! - Only when the final chunk's whole length and CRC32C match, the file is fsynced and verifies
//!   as a snapshot file with the offered (index, term), does the receiver hand it to its node,
//!   which makes it its newest snapshot (rename, directory fsync) and only then steps
//!   `InstallSnapshot` into its core. A half-received snapshot never touches the log or the state
//!   machine.
//! - Both sides bound every wait (a read or an acknowledgement that takes longer than the
//!   configured timeout closes the connection).

pub mod auth;
mod codec;
mod frame;
mod handshake;
mod message;
mod node_message;
mod parts;
mod snapshot;

#[cfg(test)]
mod tests;

pub use auth::{AuthError, Challenge, ClusterSecret, Response};
pub use codec::{ReadWire, Reader};
pub use frame::{
    decode_body, decode_frame, encode_challenge, encode_handshake, encode_handshake_body,
    encode_message, encode_message_or_parts, encode_refusal, encode_response, Body, FrameHeader,
};
pub use handshake::{valid_client_addr, Channel, Handshake};
pub use message::{decode_message_fields, encode_message_fields, encode_meta};
pub use node_message::{encode_node_message, BODY_NODE_MESSAGE, NODE_MESSAGE_BYTES_MAX};
pub use parts::{
    MessagePart, OutgoingParts, Reassembly, BODY_MESSAGE_PART, MESSAGE_FRAME_BYTES_MAX,
    MESSAGE_PART_BYTES, MESSAGE_PART_HEADER_BYTES,
};
pub use snapshot::{
    encode_ack, encode_chunk_header, encode_offer, encode_position, AckStatus, ChunkHeader,
    PositionStatus, SnapshotAck, SnapshotId, SnapshotOffer, SnapshotPosition,
    SNAPSHOT_CHANNEL_VERSION, SNAPSHOT_CHUNK_BYTES_LIMIT, SNAPSHOT_CONTROL_FRAME_BYTES_MAX,
};

/// Protocol version this build speaks.
/// Version 2 added the clock readings of heartbeats and their responses; version 3 the repair
/// messages (tags 11 and 12); version 4 their term starts and committed answers; version 5 the
/// request's holds-last flag and holds answers; version 6 the Raft group of every message and
/// snapshot offer; version 7 node messages (body kind 12).
pub const PROTOCOL_VERSION: u16 = 7;
/// The 4 bytes after a handshake's body kind, checked before anything else in it.
pub const HANDSHAKE_MAGIC: [u8; 4] = *b"KEEL";
/// Default bound on a frame body on message connections.
pub const FRAME_SIZE_BYTES_MAX_DEFAULT: u32 = 16 << 20;
/// A frame's header: body length (4), CRC32C of the body (4).
pub const FRAME_HEADER_SIZE_BYTES: usize = 8;
/// Bound on the handshake's opaque extension.
pub const HANDSHAKE_EXTENSION_BYTES_MAX: usize = 4096;
/// Required feature: this snapshot connection speaks the chunked snapshot channel.
pub const FLAG_CHUNKED_SNAPSHOT: u32 = 1;
/// Required feature: the sender authenticates with the cluster secret (challenge, response, then
/// sealed records; see "Authentication" in the module docs). The extension carries its nonce.
pub const FLAG_AUTHENTICATED: u32 = 1 << 1;
/// Optional feature: the extension is a sequence of records (see the module docs). Without it the
/// extension is opaque and ignored.
pub const FLAG_EXTENSION_RECORDS: u32 = 1 << 16;
/// Extension record: the sender's peer address as it wants to be reached, UTF-8 `host:port`.
pub const RECORD_ADVERTISED_ADDR: u8 = 1;
/// Extension record: the sender's storage incarnation, u64 little-endian (8 bytes): a random
/// number drawn when its data directory was first created.
pub const RECORD_INCARNATION: u8 = 2;
/// Extension record: the sender's client address (where the application's clients reach it),
/// UTF-8 `host:port`.
pub const RECORD_CLIENT_ADDR: u8 = 3;
/// Extension record: the initiator's handshake nonce, [`auth::NONCE_BYTES`] random bytes (with
/// [`FLAG_AUTHENTICATED`]).
pub const RECORD_NONCE: u8 = 4;
/// Longest client address record value: a DNS name (253) and a port, with room to spare.
pub const CLIENT_ADDR_BYTES_MAX: usize = 300;
/// Required-feature bits this build understands.
pub const KNOWN_REQUIRED_FLAGS: u32 = FLAG_CHUNKED_SNAPSHOT | FLAG_AUTHENTICATED;
const REQUIRED_FLAGS_MASK: u32 = 0xFFFF;

/// Body kind of the handshake, the first frame of every connection.
pub const BODY_HANDSHAKE: u8 = 1;
/// Body kind of one whole Raft message.
pub const BODY_MESSAGE: u8 = 2;
/// Body kind of a refusal: why the accepting side closes the connection.
pub const BODY_REFUSAL: u8 = 8;
/// Longest refusal reason on the wire; a longer one is cut (at a character boundary).
pub const REFUSAL_REASON_BYTES_MAX: usize = 1024;

/// Why bytes from a peer were refused. Every variant closes that connection only.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A length over the receiver's bound (a frame, a message sent in parts, a snapshot chunk),
    /// refused before anything is allocated for it.
    #[error("frame of {len_bytes} bytes exceeds the maximum of {bytes_max}")]
    Oversize {
        /// The length the peer declared, in bytes.
        len_bytes: u64,
        /// The receiver's bound it exceeds, in bytes.
        bytes_max: u64,
    },
    /// A frame body whose CRC32C is not the one its header carries.
    #[error("frame checksum mismatch (header {expected:#010x}, body {actual:#010x})")]
    BadChecksum {
        /// The CRC32C the frame header carries.
        expected: u32,
        /// The CRC32C of the body as received.
        actual: u32,
    },
    /// A body that ends in the middle of a field, or declares a length or a count that the bytes
    /// left cannot hold.
    #[error("truncated: needed {needed} more bytes while decoding {what}")]
    Truncated {
        /// The field being decoded.
        what: &'static str,
        /// How many more bytes the read needed than the body had left (for a count, at the
        /// smallest encoding of its elements).
        needed: usize,
    },
    /// A tag (body kind, message tag, status, ...) this build does not know.
    #[error("unknown {what} tag {tag}")]
    UnknownTag {
        /// Which kind of tag: body kind, message tag, status, extension record, ...
        what: &'static str,
        /// The value found.
        tag: u8,
    },
    /// A body with this many bytes left after its last field: a body must be consumed exactly.
    #[error("{0} trailing bytes after the body")]
    TrailingBytes(usize),
    /// A field whose value the format does not allow (a bool other than 0 or 1, a part out of
    /// order, a reason that is not UTF-8, ...); the string names it.
    #[error("invalid field: {0}")]
    Invalid(&'static str),
    /// A handshake that does not start with [`HANDSHAKE_MAGIC`]; the bytes found.
    #[error("bad handshake magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// A handshake of another protocol version than [`PROTOCOL_VERSION`] (or an offer of another
    /// snapshot channel version).
    #[error("unsupported protocol version {got} (this node speaks {supported})")]
    UnsupportedVersion {
        /// The version the peer speaks.
        got: u16,
        /// The version this build speaks.
        supported: u16,
    },
    /// A handshake that names another cluster.
    #[error("wrong cluster id {got:#x} (this cluster is {expected:#x})")]
    WrongClusterId {
        /// This node's cluster id.
        expected: u64,
        /// The cluster id the peer's handshake names.
        got: u64,
    },
    /// A handshake that sets required feature bits (0..16) this build does not know; the unknown
    /// bits.
    #[error("unknown required feature flags {0:#x}")]
    UnknownRequiredFlags(u32),
    /// A body of one kind where another had to come (a completed message sent in parts that is not
    /// a Raft message).
    #[error("unexpected body kind {got} (expected {expected})")]
    UnexpectedBody {
        /// The body kind that had to come.
        expected: u8,
        /// The body kind that came.
        got: u8,
    },
}
