//! [`Key`]: how the map stores a key.
//!
//! Why not `Bytes` keys: a `Bytes` key lives in an allocation of its own, so every comparison
//! with it (a hash-table probe) is a pointer chase and, on a large map, a cache miss. A key of up
//! to [`INLINE_BYTES_MAX`] bytes (nearly every key in practice) is stored inside the table slot
//! itself.
//!
//! Why copy: the command's key and value arrive as slices of a larger buffer (a log entry, a
//! received frame of many entries, a whole snapshot). A stored slice would keep all of that buffer
//! alive for as long as the key is not overwritten, so memory would grow with the buffers' sizes
//! instead of the data's. Both are copied into allocations of their own size (values: see
//! `Stored` in `mod.rs`).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

use bytes::Bytes;

/// The longest key kept inline: 38 bytes make a `Key` exactly the size of the `Bytes` variant
/// plus its tag (40 bytes).
pub(crate) const INLINE_BYTES_MAX: usize = 38;

/// A key of the state machine's map. The representation is canonical (inline exactly when the key
/// fits), and equality and order are those of the key's bytes.
#[derive(Clone)]
pub(crate) enum Key {
    Inline {
        len: u8,
        bytes: [u8; INLINE_BYTES_MAX],
    },
    /// An exact-size copy (see the module documentation), shared by snapshot views.
    Heap(Bytes),
}

impl Key {
    pub(crate) fn new(key: &[u8]) -> Key {
        if key.len() <= INLINE_BYTES_MAX {
            let mut bytes = [0u8; INLINE_BYTES_MAX];
            bytes[..key.len()].copy_from_slice(key);
            Key::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            Key::Heap(Bytes::copy_from_slice(key))
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(bytes) => bytes,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.as_bytes().len()
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The same hash as the key's bytes, as `Borrow<[u8]>` requires.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", Bytes::copy_from_slice(self.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_inline_exactly_when_they_fit_and_order_as_their_bytes() {
        let short = Key::new(b"abc");
        let edge = Key::new(&[b'k'; INLINE_BYTES_MAX]);
        let long = Key::new(&[b'k'; INLINE_BYTES_MAX + 1]);
        assert!(matches!(short, Key::Inline { len: 3, .. }));
        assert!(matches!(edge, Key::Inline { .. }));
        assert!(matches!(long, Key::Heap(_)));
        assert_eq!(std::mem::size_of::<Key>(), 40);
        // Prefixes sort first, across representations; a zero byte is not padding.
        let mut keys = [
            Key::new(&[b'k'; INLINE_BYTES_MAX + 1]),
            Key::new(b"ab\0"),
            Key::new(&[b'k'; INLINE_BYTES_MAX]),
            Key::new(b""),
            Key::new(b"ab"),
            Key::new(b"b"),
        ];
        keys.sort();
        let sorted: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let mut expected = sorted.clone();
        expected.sort();
        assert_eq!(sorted, expected);
        assert_eq!(sorted[0], b"");
        assert_eq!(sorted[1], b"ab");
        assert_eq!(sorted[2], b"ab\0");
        assert_eq!(long.len(), INLINE_BYTES_MAX + 1);
        assert_ne!(Key::new(b"ab"), Key::new(b"ab\0"));
    }

    #[test]
    fn stored_copies_do_not_keep_the_source_buffer() {
        let frame = Bytes::from(vec![7u8; 4096]);
        let value = super::super::Stored::new(&frame[10..20], 0, 0, 0);
        let key = Key::new(&frame[..INLINE_BYTES_MAX + 5]);
        // The only reference left to the frame's allocation is `frame` itself.
        assert!(frame.is_unique());
        assert_eq!(value.string(), Some(&[7u8; 10][..]));
        assert_eq!(key.len(), INLINE_BYTES_MAX + 5);
    }
}
