//! Peer authentication by a cluster secret, without I/O: the handshake's challenge and response,
//! the session keys derived from it, and the record tags that authenticate every byte after it
//! (layout and threat model in the `wire` module documentation, "Authentication").
//!
//! Everything here is a pure function of its inputs (the nonces are passed in), so the exchange
//! is tested without sockets; the transport draws the nonces from the operating system.

use hmac::{Hmac, Mac};
use keel_core::NodeId;
use sha2::{Digest, Sha256};

use super::{Handshake, Reader, WireError, FLAG_AUTHENTICATED};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a handshake nonce (each side draws one per connection).
pub const NONCE_BYTES: usize = 32;
/// Bytes of a handshake proof (a whole HMAC-SHA256).
pub const PROOF_BYTES: usize = 32;
/// Bytes of a record tag: HMAC-SHA256 truncated to its first 128 bits (as HMAC-SHA-256-128,
/// RFC 4868): a forgery still has to guess 128 bits.
pub const TAG_BYTES: usize = 16;
/// A record's header: payload length u32, then the tag.
pub const RECORD_HEADER_BYTES: usize = 4 + TAG_BYTES;
/// A sender stops adding frames to a record once its payload holds this many bytes, so a
/// record is at most this plus one frame: the receiver's bound on a message connection is its
/// frame bound + 8 + this.
pub const RECORD_FILL_BYTES: u32 = 256 << 10;
/// Shortest cluster secret accepted: 256 bits, if it is random.
pub const SECRET_BYTES_MIN: usize = 32;
/// Longest cluster secret accepted (a key file, not a document).
pub const SECRET_BYTES_MAX: usize = 4096;

/// Body kind of a [`Challenge`] (responder to initiator).
pub const BODY_AUTH_CHALLENGE: u8 = 9;
/// Body kind of a [`Response`] (initiator to responder).
pub const BODY_AUTH_RESPONSE: u8 = 10;

/// Domain separation: every value derived from the secret has its own label, so no value made
/// for one purpose (or one role, or one direction) is ever valid for another.
const LABEL_TRANSCRIPT: &[u8] = b"keel auth v1 transcript";
const LABEL_RESPONDER_PROOF: &[u8] = b"keel auth v1 responder proof";
const LABEL_INITIATOR_PROOF: &[u8] = b"keel auth v1 initiator proof";
const LABEL_KEY_TO_RESPONDER: &[u8] = b"keel auth v1 key initiator to responder";
const LABEL_KEY_TO_INITIATOR: &[u8] = b"keel auth v1 key responder to initiator";

/// Why an authentication step failed. The peer is told only "authentication failed".
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// This node has a secret, and the peer's handshake does not ask to authenticate.
    #[error("the peer did not authenticate (this node requires the cluster secret)")]
    Required,
    /// The peer's handshake asks to authenticate, and this node has no secret.
    #[error("the peer asks to authenticate, but this node has no cluster secret")]
    NotConfigured,
    /// The peer's handshake asks to authenticate without a nonce record.
    #[error("the peer's handshake has no nonce")]
    MissingNonce,
    /// A proof does not match: the peer has another secret, or forged it.
    #[error("the peer's proof does not match (another cluster secret, or forged)")]
    BadProof,
    /// The responder is another node than the one this connection was meant for.
    #[error("the peer answering is node {got}, not node {expected}")]
    WrongPeer {
        /// The node the connection was meant for.
        expected: NodeId,
        /// The node the challenge names.
        got: NodeId,
    },
    /// A sealed record's tag does not match (tampered, replayed, reordered or moved): nothing of it
    /// was handed on.
    #[error("a record's tag does not match (tampered, replayed or reordered)")]
    BadTag,
    /// A sealed record's declared length is over the reader's bound, refused before anything is
    /// allocated for it.
    #[error("a record of {len_bytes} bytes exceeds the maximum of {bytes_max}")]
    OversizeRecord {
        /// The payload length the record's header declares, in bytes.
        len_bytes: u64,
        /// The reader's bound it exceeds, in bytes.
        bytes_max: u64,
    },
}

/// The cluster secret: at least [`SECRET_BYTES_MIN`] bytes. Its `Debug` never shows it.
#[derive(Clone)]
pub struct ClusterSecret(std::sync::Arc<[u8]>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.0.len())
    }
}

impl ClusterSecret {
    /// The secret `bytes`, used as they are (no trimming). Refused, with the reason for the
    /// operator, if shorter than [`SECRET_BYTES_MIN`] or longer than [`SECRET_BYTES_MAX`].
    pub fn new(bytes: &[u8]) -> Result<ClusterSecret, String> {
        if bytes.len() < SECRET_BYTES_MIN {
            return Err(format!(
                "the cluster secret is {} bytes; at least {SECRET_BYTES_MIN} are needed \
                 (e.g. `openssl rand -base64 48`)",
                bytes.len()
            ));
        }
        if bytes.len() > SECRET_BYTES_MAX {
            return Err(format!(
                "the cluster secret is {} bytes; at most {SECRET_BYTES_MAX} are accepted",
                bytes.len()
            ));
        }
        Ok(ClusterSecret(bytes.into()))
    }

    /// HMAC-SHA256 under the secret of `label` followed by `transcript`.
    fn derive(&self, label: &[u8], transcript: &Transcript) -> [u8; 32] {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(label);
        mac.update(&transcript.0);
        mac.finalize().into_bytes().into()
    }

    fn verify(
        &self,
        label: &[u8],
        transcript: &Transcript,
        proof: &[u8; PROOF_BYTES],
    ) -> Result<(), AuthError> {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(label);
        mac.update(&transcript.0);
        // Constant time: a mismatch at the first byte takes as long as one at the last.
        mac.verify_slice(proof).map_err(|_| AuthError::BadProof)
    }
}

/// The responder's answer to an authenticated handshake (body kind 9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The responder's node id (id_b, never 0): the initiator checks it is the node it meant to
    /// reach.
    pub responder: NodeId,
    /// The responder's fresh random nonce (nonce_b).
    pub nonce: [u8; NONCE_BYTES],
    /// proof_b: HMAC-SHA256 of the responder label and the transcript.
    pub proof: [u8; PROOF_BYTES],
}

/// The initiator's proof (body kind 10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// proof_a: HMAC-SHA256 of the initiator label and the transcript.
    pub proof: [u8; PROOF_BYTES],
}

pub(super) fn encode_challenge_body(c: &Challenge, out: &mut Vec<u8>) {
    out.push(BODY_AUTH_CHALLENGE);
    out.extend_from_slice(&c.responder.to_le_bytes());
    out.extend_from_slice(&c.nonce);
    out.extend_from_slice(&c.proof);
}

pub(super) fn decode_challenge(r: &mut Reader) -> Result<Challenge, WireError> {
    let responder = r.u64("challenge responder")?;
    if responder == 0 {
        return Err(WireError::Invalid("node id 0 is reserved"));
    }
    Ok(Challenge {
        responder,
        nonce: r.array("challenge nonce")?,
        proof: r.array("challenge proof")?,
    })
}

pub(super) fn encode_response_body(resp: &Response, out: &mut Vec<u8>) {
    out.push(BODY_AUTH_RESPONSE);
    out.extend_from_slice(&resp.proof);
}

pub(super) fn decode_response(r: &mut Reader) -> Result<Response, WireError> {
    Ok(Response {
        proof: r.array("response proof")?,
    })
}

/// SHA-256 of everything both sides said before the proofs: the initiator's whole handshake
/// body (cluster id, its node id, channel, flags, its nonce and every extension record), the
/// responder's node id and nonce. Every proof and key is derived from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transcript([u8; 32]);

impl Transcript {
    /// The transcript of the initiator's handshake body `hello_body` (exactly as sent), the
    /// responder's id and its nonce.
    pub fn new(hello_body: &[u8], responder: NodeId, responder_nonce: &[u8; NONCE_BYTES]) -> Self {
        let mut h = Sha256::new();
        h.update(LABEL_TRANSCRIPT);
        h.update((hello_body.len() as u32).to_le_bytes());
        h.update(hello_body);
        h.update(responder.to_le_bytes());
        h.update(responder_nonce);
        Transcript(h.finalize().into())
    }
}

/// The two session keys of one connection, one per direction.
pub struct SessionKeys {
    /// What the initiator writes and the responder reads.
    pub to_responder: RecordKey,
    /// What the responder writes and the initiator reads.
    pub to_initiator: RecordKey,
}

impl SessionKeys {
    fn derive(secret: &ClusterSecret, t: &Transcript) -> SessionKeys {
        SessionKeys {
            to_responder: RecordKey::new(&secret.derive(LABEL_KEY_TO_RESPONDER, t)),
            to_initiator: RecordKey::new(&secret.derive(LABEL_KEY_TO_INITIATOR, t)),
        }
    }
}

/// The connecting side of the exchange.
pub struct Initiator {
    secret: ClusterSecret,
    hello_body: Vec<u8>,
    expected_responder: NodeId,
}

impl Initiator {
    /// `hello` gets the authenticated flag and `nonce`; send [`Initiator::hello_body`] as the
    /// connection's first frame. `expected_responder`: the node this connection is meant for.
    pub fn new(
        secret: ClusterSecret,
        hello: Handshake,
        nonce: [u8; NONCE_BYTES],
        expected_responder: NodeId,
    ) -> Initiator {
        let hello = hello.with_nonce(&nonce);
        let mut hello_body = Vec::new();
        hello.encode_body(&mut hello_body);
        Initiator {
            secret,
            hello_body,
            expected_responder,
        }
    }

    /// The handshake body to send, exactly as it enters the transcript.
    pub fn hello_body(&self) -> &[u8] {
        &self.hello_body
    }

    /// Checks the responder's proof; on success returns this side's proof and the session keys.
    pub fn on_challenge(&self, c: &Challenge) -> Result<(Response, SessionKeys), AuthError> {
        if c.responder != self.expected_responder {
            return Err(AuthError::WrongPeer {
                expected: self.expected_responder,
                got: c.responder,
            });
        }
        let t = Transcript::new(&self.hello_body, c.responder, &c.nonce);
        self.secret.verify(LABEL_RESPONDER_PROOF, &t, &c.proof)?;
        let response = Response {
            proof: self.secret.derive(LABEL_INITIATOR_PROOF, &t),
        };
        Ok((response, SessionKeys::derive(&self.secret, &t)))
    }
}

/// The accepting side of the exchange.
pub struct Responder {
    secret: ClusterSecret,
    transcript: Transcript,
    challenge: Challenge,
}

impl Responder {
    /// `hello` and `hello_body`: the handshake as decoded and as received. Refuses a handshake
    /// that does not ask to authenticate (or carries no nonce) before anything is derived.
    pub fn new(
        secret: ClusterSecret,
        hello: &Handshake,
        hello_body: &[u8],
        own_id: NodeId,
        nonce: [u8; NONCE_BYTES],
    ) -> Result<Responder, AuthError> {
        if hello.flags & FLAG_AUTHENTICATED == 0 {
            return Err(AuthError::Required);
        }
        if hello.nonce().ok().flatten().is_none() {
            return Err(AuthError::MissingNonce);
        }
        let transcript = Transcript::new(hello_body, own_id, &nonce);
        let challenge = Challenge {
            responder: own_id,
            nonce,
            proof: secret.derive(LABEL_RESPONDER_PROOF, &transcript),
        };
        Ok(Responder {
            secret,
            transcript,
            challenge,
        })
    }

    /// The challenge to send the initiator, its proof already computed.
    pub fn challenge(&self) -> &Challenge {
        &self.challenge
    }

    /// Checks the initiator's proof; on success returns the session keys.
    pub fn on_response(&self, r: &Response) -> Result<SessionKeys, AuthError> {
        self.secret
            .verify(LABEL_INITIATOR_PROOF, &self.transcript, &r.proof)?;
        Ok(SessionKeys::derive(&self.secret, &self.transcript))
    }
}

/// One direction's session key and record sequence number. Records are sealed and opened in
/// order; the sequence number is never sent, so a record replayed, dropped from the middle or
/// moved is opened under another number and its tag does not match.
pub struct RecordKey {
    /// Keyed once; cloned per record (the key's inner and outer blocks are hashed only once).
    mac: HmacSha256,
    seq: u64,
}

impl RecordKey {
    fn new(key: &[u8; 32]) -> RecordKey {
        RecordKey {
            mac: HmacSha256::new_from_slice(key).expect("HMAC takes any key length"),
            seq: 0,
        }
    }

    fn mac_of(&self, payload: &[u8]) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(&self.seq.to_le_bytes());
        mac.update(payload);
        mac
    }

    /// The tag of the next record, whose payload is `payload`.
    pub fn seal(&mut self, payload: &[u8]) -> [u8; TAG_BYTES] {
        let full = self.mac_of(payload).finalize().into_bytes();
        self.seq += 1;
        full[..TAG_BYTES].try_into().expect("16 of 32 bytes")
    }

    /// Checks the next record's tag (constant time); only a matching record moves the sequence
    /// number on.
    pub fn open(&mut self, payload: &[u8], tag: &[u8; TAG_BYTES]) -> Result<(), AuthError> {
        self.mac_of(payload)
            .verify_truncated_left(tag)
            .map_err(|_| AuthError::BadTag)?;
        self.seq += 1;
        Ok(())
    }

    /// Writes a whole record (header and `payload`) to `out`.
    pub fn seal_record(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        let tag = self.seal(payload);
        out.extend_from_slice(&record_len(payload).to_le_bytes());
        out.extend_from_slice(&tag);
        out.extend_from_slice(payload);
    }

    /// Seals, in place, a record whose payload follows [`RECORD_HEADER_BYTES`] reserved bytes
    /// at the start of `buf` (no copy of the payload).
    pub fn seal_in_place(&mut self, buf: &mut [u8]) {
        let (header, payload) = buf.split_at_mut(RECORD_HEADER_BYTES);
        let tag = self.seal(payload);
        header[..4].copy_from_slice(&record_len(payload).to_le_bytes());
        header[4..].copy_from_slice(&tag);
    }
}

fn record_len(payload: &[u8]) -> u32 {
    u32::try_from(payload.len()).expect("record under 4 GiB")
}

/// A record header: the payload length (to check against the receiver's bound before anything
/// is allocated) and the tag.
pub fn parse_record_header(
    header: &[u8; RECORD_HEADER_BYTES],
    bytes_max: u32,
) -> Result<(u32, [u8; TAG_BYTES]), AuthError> {
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
    if len > bytes_max {
        return Err(AuthError::OversizeRecord {
            len_bytes: len.into(),
            bytes_max: bytes_max.into(),
        });
    }
    Ok((len, header[4..].try_into().expect("16 bytes")))
}

#[cfg(test)]
mod tests;
