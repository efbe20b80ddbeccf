//! `resp_decode`: the RESP request decoder, as a server connection runs it, on anything a client
//! may send. The first byte picks the limits (small ones, so every bound is reached, or the
//! server's defaults) and how the bytes arrive (whole, or in pieces of a drawn size); the rest
//! is the stream.
//!
//! Checked besides "never panics":
//! - the incremental decoder fed the stream in pieces (`Decoder::decode_split` over a growing
//!   buffer, as the server reads) returns exactly what the stateless decoder returns on the whole
//!   stream: the same frames from the same bytes, and the same error;
//! - every frame round-trips: its arguments encoded as a multibulk request
//!   (`resp::encode_request`), and as an inline line quoting every byte (`"\xHH"`), decode to
//!   the same arguments.

use bytes::BytesMut;
use keel_resp::{self as resp, Decoder, Frame, FrameKind, Limits, ProtocolError};

use crate::Input;

/// Frames decoded from one input at most.
const FRAMES_MAX: usize = 256;

pub fn resp_decode(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let limits = if mode & 1 == 0 {
        Limits {
            bulk_bytes_max: 16,
            args_max: 4,
            inline_bytes_max: 32,
            request_bytes_max: 64,
            multi_commands_max: 4,
            multi_bytes_max: 64,
        }
    } else {
        Limits::default()
    };
    // 0: the whole stream at once; otherwise pieces of this many bytes.
    let piece = usize::from(mode >> 1) % 8;
    let stream = input.rest();

    let whole = decode_whole(stream, &limits);
    let pieces = decode_in_pieces(
        stream,
        &limits,
        if piece == 0 { stream.len() } else { piece },
    );
    assert_eq!(
        whole, pieces,
        "the decoder's answer depends on how the bytes arrived"
    );
    for (frame, _) in &whole.frames {
        round_trip(frame);
    }
}

/// What decoding a stream gave: the frames with the bytes each used, and how it ended.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    frames: Vec<(Frame, usize)>,
    /// `None`: the stream ended inside a request (or at a frame boundary).
    error: Option<ProtocolError>,
}

fn decode_whole(stream: &[u8], limits: &Limits) -> Decoded {
    let mut out = Decoded {
        frames: Vec::new(),
        error: None,
    };
    let mut at = 0;
    while out.frames.len() < FRAMES_MAX {
        match resp::parse(&stream[at..], limits) {
            Ok(Some((frame, used))) => {
                assert!(used > 0 && at + used <= stream.len(), "bad frame length");
                at += used;
                out.frames.push((frame, used));
            }
            Ok(None) => break,
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    out
}

/// The server's loop: append what the socket delivered, split off every whole request.
fn decode_in_pieces(stream: &[u8], limits: &Limits, piece: usize) -> Decoded {
    let mut out = Decoded {
        frames: Vec::new(),
        error: None,
    };
    let mut decoder = Decoder::new(*limits);
    let mut buf = BytesMut::new();
    let mut fed = 0;
    'outer: while fed < stream.len() {
        let end = (fed + piece.max(1)).min(stream.len());
        buf.extend_from_slice(&stream[fed..end]);
        fed = end;
        loop {
            if out.frames.len() == FRAMES_MAX {
                break 'outer;
            }
            let before = buf.len();
            match decoder.decode_split(&mut buf) {
                Ok(Some(frame)) => {
                    let used = before - buf.len();
                    out.frames.push((frame, used));
                }
                Ok(None) => break,
                Err(e) => {
                    out.error = Some(e);
                    break 'outer;
                }
            }
        }
    }
    out
}

/// Encodes `frame`'s arguments again, as a multibulk request and as a quoted inline line: each
/// decodes (with the default limits) to the same arguments.
fn round_trip(frame: &Frame) {
    let limits = Limits::default();
    let mut multibulk = BytesMut::new();
    resp::encode_request(&frame.args, &mut multibulk);
    let (again, used) = resp::parse(&multibulk, &limits)
        .expect("an encoded request decodes")
        .expect("an encoded request is whole");
    assert_eq!(used, multibulk.len());
    assert_eq!(again.kind, FrameKind::Multibulk);
    assert_eq!(again.args, frame.args, "multibulk round trip");

    let mut line = Vec::new();
    for arg in &frame.args {
        if !line.is_empty() {
            line.push(b' ');
        }
        line.push(b'"');
        for b in arg.iter() {
            line.extend_from_slice(format!("\\x{b:02x}").as_bytes());
        }
        line.push(b'"');
    }
    if frame.args.is_empty() || line.len() > limits.inline_bytes_max {
        return;
    }
    line.extend_from_slice(b"\r\n");
    let (again, used) = resp::parse(&line, &limits)
        .expect("a quoted inline line decodes")
        .expect("a quoted inline line is whole");
    assert_eq!(used, line.len());
    assert_eq!(again.kind, FrameKind::Inline);
    assert_eq!(again.args, frame.args, "inline round trip");
}
