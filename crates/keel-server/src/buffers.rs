//! A connection's input buffer, sized by the request it is receiving and charged against the
//! node's total (`client-query-buffer-total-bytes`).
//!
//! The buffer is only ever replaced by a fresh allocation of a chosen size, never grown in place
//! (which would double it): so the size charged is the size allocated. Requests are split off
//! its front and answered before the connection reads again, so when it is replaced nothing else
//! holds the old allocation and it is freed at once (except arguments queued by MULTI, bounded
//! separately by `Limits::multi_bytes_max`).
//!
//! Sizing, before every read:
//! - a large argument whose length line arrived gets room for all of it at once (one
//!   allocation, one charge, refused before any of its bytes are read if the total would go
//!   past its bound);
//! - otherwise room for one more read ([`INPUT_READ_BYTES`]), growing by doubling for requests
//!   of many arguments, never beyond one maximum-size request plus one read;
//! - once the request that needed a large buffer is done, the buffer goes back to one read's
//!   size: the memory is returned, not just marked free.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::BytesMut;

use super::limits::INPUT_READ_BYTES;

/// The node's total would go past `client-query-buffer-total-bytes`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct QueryBuffersFull {
    pub wanted_bytes: usize,
    pub total_max_bytes: usize,
}

pub(super) struct QueryBuffer<'a> {
    pub bytes: BytesMut,
    /// The allocation's size, counted in `total`.
    charged: usize,
    total: &'a AtomicUsize,
    total_max: usize,
    /// One maximum-size request plus one read: no buffer is ever larger.
    own_max: usize,
}

impl<'a> QueryBuffer<'a> {
    pub fn new(total: &'a AtomicUsize, total_max: usize, request_bytes_max: usize) -> Self {
        QueryBuffer {
            bytes: BytesMut::new(),
            charged: 0,
            total,
            total_max,
            own_max: request_bytes_max + INPUT_READ_BYTES,
        }
    }

    /// The bytes this buffer holds allocated (and has charged).
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.charged
    }

    /// Makes room for the next read; `awaited` is how many bytes the buffer must hold before
    /// the argument being received is complete (`Decoder::awaited_len`, 0 if unknown).
    pub fn prepare(&mut self, awaited: usize) -> Result<(), QueryBuffersFull> {
        let held = self.bytes.len().max(awaited);
        let room = self.bytes.capacity();
        let too_small = room < held.max(self.bytes.len() + INPUT_READ_BYTES / 4);
        let wanted = (held + INPUT_READ_BYTES).min(self.own_max);
        let oversized = self.charged > INPUT_READ_BYTES && self.charged > 2 * wanted;
        if !too_small && !oversized {
            return Ok(());
        }
        let size = if too_small {
            // Doubling for requests of many arguments, each known only when it arrives.
            wanted.max((2 * self.charged).min(self.own_max))
        } else {
            wanted
        };
        self.charge(size)?;
        let mut fresh = BytesMut::with_capacity(size);
        fresh.extend_from_slice(&self.bytes);
        self.bytes = fresh;
        Ok(())
    }

    /// Charges an allocation of `size` in place of the current one.
    fn charge(&mut self, size: usize) -> Result<(), QueryBuffersFull> {
        if size > self.charged {
            let more = size - self.charged;
            let before = self.total.fetch_add(more, Ordering::AcqRel);
            if before + more > self.total_max {
                self.total.fetch_sub(more, Ordering::AcqRel);
                return Err(QueryBuffersFull {
                    wanted_bytes: size,
                    total_max_bytes: self.total_max,
                });
            }
        } else {
            self.total.fetch_sub(self.charged - size, Ordering::AcqRel);
        }
        self.charged = size;
        Ok(())
    }
}

impl Drop for QueryBuffer<'_> {
    fn drop(&mut self) {
        self.total.fetch_sub(self.charged, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Buf;

    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn a_large_argument_is_charged_once_and_given_back_when_done() {
        let total = AtomicUsize::new(0);
        let mut buffer = QueryBuffer::new(&total, 100 * MIB, 64 * MIB);
        buffer.prepare(0).unwrap();
        assert_eq!(buffer.allocated(), INPUT_READ_BYTES);
        assert_eq!(total.load(Ordering::Relaxed), INPUT_READ_BYTES);

        // A 10 MiB argument announced: room for all of it, in one allocation.
        buffer.bytes.extend_from_slice(&[b'x'; 100]);
        buffer.prepare(10 * MIB).unwrap();
        assert_eq!(buffer.allocated(), 10 * MIB + INPUT_READ_BYTES);
        assert!(buffer.bytes.capacity() >= 10 * MIB);
        assert_eq!(&buffer.bytes[..], &[b'x'; 100][..], "what was read is kept");
        let before = buffer.bytes.as_ptr();
        buffer.bytes.resize(10 * MIB, b'y');
        buffer.prepare(10 * MIB).unwrap();
        assert_eq!(
            buffer.bytes.as_ptr(),
            before,
            "no reallocation while it arrives"
        );

        // The request is split off and answered: back to one read's size, the total with it.
        buffer.bytes.advance(10 * MIB - 7);
        buffer.prepare(0).unwrap();
        assert_eq!(buffer.allocated(), 7 + INPUT_READ_BYTES);
        assert_eq!(total.load(Ordering::Relaxed), 7 + INPUT_READ_BYTES);
        assert_eq!(buffer.bytes.len(), 7);
        drop(buffer);
        assert_eq!(total.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_total_refuses_the_request_that_would_cross_it() {
        let total = AtomicUsize::new(0);
        let mut first = QueryBuffer::new(&total, 24 * MIB, 16 * MIB);
        let mut second = QueryBuffer::new(&total, 24 * MIB, 16 * MIB);
        first.prepare(0).unwrap();
        second.prepare(0).unwrap();
        first.prepare(16 * MIB).unwrap();
        assert_eq!(
            second.prepare(16 * MIB),
            Err(QueryBuffersFull {
                wanted_bytes: 16 * MIB + INPUT_READ_BYTES,
                total_max_bytes: 24 * MIB
            })
        );
        assert_eq!(
            total.load(Ordering::Relaxed),
            first.allocated() + second.allocated(),
            "a refused charge is not kept"
        );
        drop(first);
        second.prepare(16 * MIB).unwrap();
    }

    #[test]
    fn many_small_arguments_grow_by_doubling_within_the_request_bound() {
        let total = AtomicUsize::new(0);
        let mut buffer = QueryBuffer::new(&total, usize::MAX / 2, MIB);
        let mut allocations = 0;
        while buffer.bytes.len() < MIB {
            let before = buffer.allocated();
            buffer.prepare(0).unwrap();
            allocations += usize::from(buffer.allocated() != before);
            let room = buffer.bytes.capacity() - buffer.bytes.len();
            let n = room.min(MIB - buffer.bytes.len());
            buffer.bytes.resize(buffer.bytes.len() + n, 0);
        }
        assert!(allocations <= 8, "{allocations} allocations for 1 MiB");
        assert!(buffer.allocated() <= MIB + INPUT_READ_BYTES);
    }
}
