//! SHA-1 (FIPS 180-4), for script names: `EVALSHA` and `SCRIPT LOAD` name a script by the SHA-1
//! of its body, in lowercase hex, as Redis does, and scripts reach it as `redis.sha1hex`.
//!
//! SHA-1 is broken for collision resistance; here it is only a name clients and Redis agree on,
//! so a small implementation of our own serves and keeps a crate out of the dependencies.

/// The SHA-1 of `data`, as 40 lowercase hex digits.
pub fn sha1_hex(data: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = sha1(data);
    let mut text = String::with_capacity(40);
    for byte in digest {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    text
}

/// The 20-byte SHA-1 digest of `data`.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut state: [u32; 5] = [
        0x6745_2301,
        0xefcd_ab89,
        0x98ba_dcfe,
        0x1032_5476,
        0xc3d2_e1f0,
    ];

    let mut blocks = data.chunks_exact(64);
    for block in &mut blocks {
        compress(&mut state, block);
    }

    // Padding: a 1 bit, zeros up to 56 bytes mod 64, then the message length in bits (big
    // endian). The tail plus padding is one block, or two when fewer than 9 bytes remain free.
    let tail = blocks.remainder();
    let mut last = [0u8; 128];
    last[..tail.len()].copy_from_slice(tail);
    last[tail.len()] = 0x80;
    let last_len = if tail.len() < 56 { 64 } else { 128 };
    // The length field is the bit count mod 2^64, as the standard says.
    let length_bits = (data.len() as u64).wrapping_mul(8);
    last[last_len - 8..last_len].copy_from_slice(&length_bits.to_be_bytes());
    for block in last[..last_len].chunks_exact(64) {
        compress(&mut state, block);
    }

    let mut digest = [0u8; 20];
    for (out, word) in digest.chunks_exact_mut(4).zip(state) {
        out.copy_from_slice(&word.to_be_bytes());
    }
    digest
}

/// Folds one 64-byte block into `state`.
fn compress(state: &mut [u32; 5], block: &[u8]) {
    debug_assert_eq!(block.len(), 64);
    let mut w = [0u32; 80];
    for (word, bytes) in w.iter_mut().zip(block.chunks_exact(4)) {
        *word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    for t in 16..80 {
        w[t] = (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1);
    }

    let [mut a, mut b, mut c, mut d, mut e] = *state;
    for (t, &word) in w.iter().enumerate() {
        let (f, k) = match t {
            0..=19 => ((b & c) | (!b & d), 0x5a82_7999),
            20..=39 => (b ^ c ^ d, 0x6ed9_eba1),
            40..=59 => ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc),
            _ => (b ^ c ^ d, 0xca62_c1d6),
        };
        let temp = a
            .rotate_left(5)
            .wrapping_add(f)
            .wrapping_add(e)
            .wrapping_add(k)
            .wrapping_add(word);
        e = d;
        d = c;
        c = b.rotate_left(30);
        b = a;
        a = temp;
    }

    for (word, add) in state.iter_mut().zip([a, b, c, d, e]) {
        *word = word.wrapping_add(add);
    }
}

#[cfg(test)]
mod tests {
    use super::sha1_hex;

    #[test]
    fn known_vectors() {
        // Expected values from `printf %s TEXT | sha1sum`.
        for (text, want) in [
            ("", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
            ("abc", "a9993e364706816aba3e25717850c26c9cd0d89d"),
            ("return 1", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"),
            (
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "84983e441c3bd26ebaae4aa1f95129e5e54670f1",
            ),
            (
                "The quick brown fox jumps over the lazy dog",
                "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12",
            ),
        ] {
            assert_eq!(sha1_hex(text.as_bytes()), want, "{text:?}");
        }
    }

    #[test]
    fn padding_boundaries() {
        // 55 bytes: the length still fits the last block; 56: it needs a second one; 64: the
        // padding is a whole block of its own.
        for (len, want) in [
            (55, "c1c8bbdc22796e28c0e15163d20899b65621d65a"),
            (56, "c2db330f6083854c99d4b5bfb6e8f29f201be699"),
            (64, "0098ba824b5c16427bd7a1122a5a442a25ec644d"),
        ] {
            assert_eq!(sha1_hex(&vec![b'a'; len]), want, "{len} bytes");
        }
    }

    #[test]
    fn a_million_a() {
        assert_eq!(
            sha1_hex(&vec![b'a'; 1_000_000]),
            "34aa973cd4c4daa4f61eeb2bdbad27316534016f"
        );
    }
}
