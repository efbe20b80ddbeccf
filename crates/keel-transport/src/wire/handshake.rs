//! [`Handshake`], the first frame of every connection: its fields, the extension records
//! (advertised peer address, storage incarnation, client address, authentication nonce) with
//! [`valid_client_addr`], the required-flag check, and its body's encoding and decoding. The
//! layout is "Handshake (body kind 1)" in the module documentation of `wire`; apart from the
//! frames and the other bodies because a handshake is decided on before anything else a
//! connection carries.

use std::net::SocketAddr;

use bytes::Bytes;
use keel_core::NodeId;

use super::{
    auth, Reader, WireError, BODY_HANDSHAKE, CLIENT_ADDR_BYTES_MAX, FLAG_AUTHENTICATED,
    FLAG_CHUNKED_SNAPSHOT, FLAG_EXTENSION_RECORDS, HANDSHAKE_EXTENSION_BYTES_MAX, HANDSHAKE_MAGIC,
    KNOWN_REQUIRED_FLAGS, PROTOCOL_VERSION, RECORD_ADVERTISED_ADDR, RECORD_CLIENT_ADDR,
    RECORD_INCARNATION, RECORD_NONCE, REQUIRED_FLAGS_MASK,
};

/// Whether `addr` can be announced as a client address: `host:port` with a non-empty host of
/// printable ASCII without spaces (a name, an IPv4 address or a bracketed IPv6 address), a port
/// that is a number, at most [`CLIENT_ADDR_BYTES_MAX`] bytes in all.
pub fn valid_client_addr(addr: &str) -> bool {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return false;
    };
    addr.len() <= CLIENT_ADDR_BYTES_MAX
        && !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_graphic())
        && port.parse::<u16>().is_ok()
}

/// What a connection carries after its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// Raft messages, one frame each or in parts (channel byte 0).
    Messages,
    /// One snapshot transfer, chunked (channel byte 1; needs [`FLAG_CHUNKED_SNAPSHOT`]).
    Snapshot,
}

/// What a handshake's extension records say.
#[derive(Default)]
struct Records {
    advertised_addr: Option<SocketAddr>,
    incarnation: Option<u64>,
    client_addr: Option<String>,
    nonce: Option<[u8; auth::NONCE_BYTES]>,
}

/// The first frame of every connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// The sender's protocol version; decoding refuses any but [`PROTOCOL_VERSION`].
    pub version: u16,
    /// What the connection carries after the handshake.
    pub channel: Channel,
    /// Feature bits: 0..16 required (see [`Handshake::check_required_flags`]), 16..32 optional.
    pub flags: u32,
    /// The sender's cluster id.
    pub cluster_id: u64,
    /// The sender's node id (never 0).
    pub node_id: NodeId,
    /// The extension bytes, at most [`HANDSHAKE_EXTENSION_BYTES_MAX`]: extension records when
    /// [`FLAG_EXTENSION_RECORDS`] is set, otherwise opaque and ignored.
    pub extension: Bytes,
}

impl Handshake {
    /// A handshake of this build's protocol version with no extension; a snapshot channel's sets
    /// [`FLAG_CHUNKED_SNAPSHOT`].
    pub fn new(cluster_id: u64, node_id: NodeId, channel: Channel) -> Self {
        Handshake {
            version: PROTOCOL_VERSION,
            channel,
            flags: match channel {
                Channel::Messages => 0,
                Channel::Snapshot => FLAG_CHUNKED_SNAPSHOT,
            },
            cluster_id,
            node_id,
            extension: Bytes::new(),
        }
    }

    /// Announces `addr` as the address other members reach this node at, in an extension record.
    pub fn with_advertised_addr(self, addr: SocketAddr) -> Self {
        self.with_record(RECORD_ADVERTISED_ADDR, addr.to_string().as_bytes())
    }

    /// Announces the sender's storage incarnation, in an extension record.
    pub fn with_incarnation(self, incarnation: u64) -> Self {
        self.with_record(RECORD_INCARNATION, &incarnation.to_le_bytes())
    }

    /// Announces where the application's clients reach this node, in an extension record.
    /// `addr` must pass [`valid_client_addr`] (checked where it is configured).
    pub fn with_client_addr(self, addr: &str) -> Self {
        assert!(
            valid_client_addr(addr),
            "client address {addr:?} is not host:port"
        );
        self.with_record(RECORD_CLIENT_ADDR, addr.as_bytes())
    }

    /// Asks to authenticate (the required flag [`FLAG_AUTHENTICATED`]) with `nonce` in an
    /// extension record.
    pub fn with_nonce(mut self, nonce: &[u8; auth::NONCE_BYTES]) -> Self {
        self.flags |= FLAG_AUTHENTICATED;
        self.with_record(RECORD_NONCE, nonce)
    }

    fn with_record(mut self, kind: u8, value: &[u8]) -> Self {
        let mut records = self.extension.to_vec();
        records.push(kind);
        records.extend_from_slice(&(value.len() as u16).to_le_bytes());
        records.extend_from_slice(value);
        self.extension = Bytes::from(records);
        self.flags |= FLAG_EXTENSION_RECORDS;
        self
    }

    /// The sender's advertised peer address, if it sent one.
    pub fn advertised_addr(&self) -> Result<Option<SocketAddr>, WireError> {
        Ok(self.records()?.advertised_addr)
    }

    /// The sender's client address, if it sent one.
    pub fn client_addr(&self) -> Result<Option<String>, WireError> {
        Ok(self.records()?.client_addr)
    }

    /// The initiator's handshake nonce, if it sent one.
    pub fn nonce(&self) -> Result<Option<[u8; auth::NONCE_BYTES]>, WireError> {
        Ok(self.records()?.nonce)
    }

    /// The sender's storage incarnation, if it sent one.
    pub fn incarnation(&self) -> Result<Option<u64>, WireError> {
        Ok(self.records()?.incarnation)
    }

    /// The extension's records. Records of unknown types are skipped; a record list that does
    /// not parse is refused (the flag promised the layout).
    fn records(&self) -> Result<Records, WireError> {
        let mut found = Records::default();
        if self.flags & FLAG_EXTENSION_RECORDS == 0 {
            return Ok(found);
        }
        let mut r = Reader::new(self.extension.clone());
        while r.remaining() > 0 {
            let kind = r.u8("extension record type")?;
            let len = r.u16("extension record length")? as usize;
            let value = r.bytes(len, "extension record")?;
            match kind {
                RECORD_ADVERTISED_ADDR => {
                    let addr = std::str::from_utf8(&value)
                        .ok()
                        .and_then(|text| text.parse().ok())
                        .ok_or(WireError::Invalid("advertised address is not host:port"))?;
                    found.advertised_addr = Some(addr);
                }
                RECORD_INCARNATION => {
                    let bytes: [u8; 8] = value[..]
                        .try_into()
                        .map_err(|_| WireError::Invalid("incarnation is not 8 bytes"))?;
                    found.incarnation = Some(u64::from_le_bytes(bytes));
                }
                RECORD_CLIENT_ADDR => {
                    let addr = std::str::from_utf8(&value)
                        .ok()
                        .filter(|text| valid_client_addr(text))
                        .ok_or(WireError::Invalid("client address is not host:port"))?;
                    found.client_addr = Some(addr.to_string());
                }
                RECORD_NONCE => {
                    let nonce = value[..]
                        .try_into()
                        .map_err(|_| WireError::Invalid("nonce is not 32 bytes"))?;
                    found.nonce = Some(nonce);
                }
                _ => {}
            }
        }
        Ok(found)
    }

    /// Refuses a required feature this build does not know (checked before anything else the
    /// handshake says is acted on: the rest may mean something else under that feature).
    pub fn check_required_flags(&self) -> Result<(), WireError> {
        let unknown = self.flags & REQUIRED_FLAGS_MASK & !KNOWN_REQUIRED_FLAGS;
        if unknown != 0 {
            return Err(WireError::UnknownRequiredFlags(unknown));
        }
        Ok(())
    }

    pub(super) fn encode_body(&self, out: &mut Vec<u8>) {
        assert!(self.extension.len() <= HANDSHAKE_EXTENSION_BYTES_MAX);
        out.push(BODY_HANDSHAKE);
        out.extend_from_slice(&HANDSHAKE_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.push(match self.channel {
            Channel::Messages => 0,
            Channel::Snapshot => 1,
        });
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.cluster_id.to_le_bytes());
        out.extend_from_slice(&self.node_id.to_le_bytes());
        out.extend_from_slice(&(self.extension.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.extension);
    }

    pub(super) fn decode_fields(r: &mut Reader) -> Result<Self, WireError> {
        let magic: [u8; 4] = r.array("handshake magic")?;
        if magic != HANDSHAKE_MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        let version = r.u16("handshake version")?;
        if version != PROTOCOL_VERSION {
            return Err(WireError::UnsupportedVersion {
                got: version,
                supported: PROTOCOL_VERSION,
            });
        }
        let channel = match r.u8("handshake channel")? {
            0 => Channel::Messages,
            1 => Channel::Snapshot,
            tag => {
                return Err(WireError::UnknownTag {
                    what: "channel",
                    tag,
                })
            }
        };
        let flags = r.u32("handshake flags")?;
        let cluster_id = r.u64("cluster id")?;
        let node_id = r.u64("node id")?;
        if node_id == 0 {
            return Err(WireError::Invalid("node id 0 is reserved"));
        }
        let ext_len = r.u16("extension length")? as usize;
        if ext_len > HANDSHAKE_EXTENSION_BYTES_MAX {
            return Err(WireError::Invalid("handshake extension too long"));
        }
        let extension = r.bytes(ext_len, "handshake extension")?;
        Ok(Handshake {
            version,
            channel,
            flags,
            cluster_id,
            node_id,
            extension,
        })
    }
}
