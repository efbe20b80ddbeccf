//! The peer wire format's reads: keel-core's bounds-checked [`Reader`], whose short reads become
//! [`WireError::Truncated`] (naming what was being decoded, so a truncated body is reported
//! precisely), and the two reads this format adds ([`ReadWire`]).

use keel_core::codec::Short;

pub use keel_core::codec::Reader;

use super::WireError;

impl From<Short> for WireError {
    fn from(short: Short) -> WireError {
        WireError::Truncated {
            what: short.what,
            needed: short.needed_bytes(),
        }
    }
}

/// What the wire format reads beyond the core reader's fields.
pub trait ReadWire {
    /// A `u8` that must be 0 or 1.
    fn bool(&mut self, what: &'static str) -> Result<bool, WireError>;
    /// The end of a body: nothing may follow.
    fn finish(self) -> Result<(), WireError>;
}

impl ReadWire for Reader {
    fn bool(&mut self, what: &'static str) -> Result<bool, WireError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Invalid("a bool must be 0 or 1")),
        }
    }

    fn finish(self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(WireError::TrailingBytes(n)),
        }
    }
}
