use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;

fn limits() -> Limits {
    Limits::default()
}

fn args(frame: &Frame) -> Vec<&[u8]> {
    frame.args.iter().map(|a| a.as_ref()).collect()
}

fn request<A: AsRef<[u8]>>(parts: &[A]) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_request(parts, &mut out);
    out.to_vec()
}

fn encoded(reply: &Reply, version: ProtocolVersion) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode(reply, version, &mut out);
    out.to_vec()
}

#[test]
fn multibulk_request_round_trips() {
    let parts: [&[u8]; 3] = [b"SET", b"key", b"va\r\nlue\0"];
    let wire = request(&parts);
    assert_eq!(
        wire,
        b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$8\r\nva\r\nlue\0\r\n"
    );
    let (frame, used) = parse(&wire, &limits()).unwrap().unwrap();
    assert_eq!(used, wire.len());
    assert_eq!(frame.kind, FrameKind::Multibulk);
    assert_eq!(args(&frame), parts);
}

#[test]
fn empty_arrays_and_blank_lines_are_empty_frames() {
    for wire in [&b"*0\r\n"[..], b"*-1\r\n", b"\r\n", b"   \n"] {
        let (frame, used) = parse(wire, &limits()).unwrap().unwrap();
        assert!(frame.is_empty(), "{wire:?}");
        assert_eq!(used, wire.len());
    }
    // An empty bulk string is a real argument.
    let (frame, _) = parse(b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", &limits())
        .unwrap()
        .unwrap();
    assert_eq!(args(&frame), [&b"ECHO"[..], b""]);
}

#[test]
fn inline_commands_split_like_redis() {
    let cases: [(&[u8], Vec<&[u8]>); 6] = [
        (b"PING\r\n", vec![b"PING"]),
        (b"set  a   b\n", vec![b"set", b"a", b"b"]),
        (
            b"SET \"a key\" 'it\\'s'\r\n",
            vec![b"SET", b"a key", b"it's"],
        ),
        (b"ECHO \"\\x41\\n\\t\\\"\"\r\n", vec![b"ECHO", b"A\n\t\""]),
        (b"ECHO \"\"\r\n", vec![b"ECHO", b""]),
        (b"ECHO a\"b c\"\r\n", vec![b"ECHO", b"ab c"]),
    ];
    for (wire, want) in cases {
        let (frame, used) = parse(wire, &limits()).unwrap().unwrap();
        assert_eq!(frame.kind, FrameKind::Inline);
        assert_eq!(args(&frame), want, "{:?}", String::from_utf8_lossy(wire));
        assert_eq!(used, wire.len());
    }
    for bad in [
        &b"SET \"abc\r\n"[..],
        b"SET 'abc\r\n",
        b"SET \"a\"b\r\n",
        b"ECHO a\"b c\"d\r\n",
    ] {
        assert_eq!(
            parse(bad, &limits()),
            Err(ProtocolError::UnbalancedQuotes),
            "{bad:?}"
        );
    }
}

#[test]
fn partial_frames_wait_for_more_bytes() {
    let wire = request(&[&b"SET"[..], b"k", b"value"]);
    for cut in 0..wire.len() {
        assert_eq!(parse(&wire[..cut], &limits()), Ok(None), "cut at {cut}");
    }
    assert!(parse(&wire, &limits()).unwrap().is_some());
    assert_eq!(parse(b"PING", &limits()), Ok(None));
}

#[test]
fn pipelined_frames_in_one_buffer() {
    let mut wire = request(&[&b"SET"[..], b"a", b"1"]);
    wire.extend_from_slice(b"PING\r\n");
    wire.extend_from_slice(&request(&[&b"GET"[..], b"a"]));
    let mut decoder = Decoder::new(limits());
    let mut rest = &wire[..];
    let mut names = Vec::new();
    while let Some((frame, used)) = decoder.decode(rest).unwrap() {
        names.push(frame.args[0].clone());
        rest = &rest[used..];
    }
    assert!(rest.is_empty());
    assert_eq!(names, [&b"SET"[..], b"PING", b"GET"]);
}

#[test]
fn limits_are_enforced_before_the_data_arrives() {
    let small = Limits {
        bulk_bytes_max: 10,
        args_max: 3,
        inline_bytes_max: 16,
        request_bytes_max: 50,
        ..Limits::default()
    };
    // Only the headers are sent: the claims alone are rejected.
    assert_eq!(
        parse(b"*4\r\n", &small),
        Err(ProtocolError::TooManyArguments { count: 4, max: 3 })
    );
    assert_eq!(
        parse(b"*1\r\n$11\r\n", &small),
        Err(ProtocolError::BulkTooLong { len: 11, max: 10 })
    );
    assert_eq!(
        parse(
            b"*3\r\n$10\r\n0123456789\r\n$10\r\n0123456789\r\n$10\r\n",
            &small
        ),
        Err(ProtocolError::RequestTooLarge { len: 55, max: 50 })
    );
    // Claims that would need gigabytes cost nothing with the default limits either.
    assert!(matches!(
        parse(b"*1\r\n$9223372036854775807\r\n", &limits()),
        Err(ProtocolError::BulkTooLong { .. })
    ));
    assert!(matches!(
        parse(b"*2147483648\r\n", &limits()),
        Err(ProtocolError::TooManyArguments { .. })
    ));
    // An inline line longer than the limit, with or without its newline.
    assert_eq!(
        parse(&[b'a'; 17], &small),
        Err(ProtocolError::InlineTooLong { max: 16 })
    );
    let mut long_line = vec![b'a'; 20];
    long_line.extend_from_slice(b"\r\n");
    assert_eq!(
        parse(&long_line, &small),
        Err(ProtocolError::InlineTooLong { max: 16 })
    );
    assert_eq!(
        parse(b"a b c d\r\n", &small),
        Err(ProtocolError::TooManyArguments { count: 4, max: 3 })
    );
    // A length line that never ends.
    assert_eq!(
        parse(&[b"*1"[..].to_vec(), vec![b'1'; 40]].concat(), &limits()),
        Err(ProtocolError::LengthLineTooLong)
    );
}

#[test]
fn garbage_is_a_protocol_error() {
    let cases: [(&[u8], ProtocolError); 6] = [
        (b"*x\r\n", ProtocolError::InvalidMultibulkLength),
        (b"*1\r\n:5\r\n", ProtocolError::ExpectedBulk(b':')),
        (b"*1\r\n$-1\r\n", ProtocolError::InvalidBulkLength),
        (b"*1\r\n$abc\r\n", ProtocolError::InvalidBulkLength),
        (b"*1\r\n$3\r\nabcXY", ProtocolError::MissingCrlf),
        (b"*01\r\n", ProtocolError::InvalidMultibulkLength),
    ];
    for (wire, want) in cases {
        assert_eq!(parse(wire, &limits()), Err(want), "{wire:?}");
    }
    let reply = ProtocolError::ExpectedBulk(b':').to_reply();
    assert_eq!(
        reply,
        Reply::error("ERR Protocol error: expected '$', got ':'")
    );
}

#[test]
fn replies_encode_in_resp2_and_resp3() {
    use ProtocolVersion::{Resp2, Resp3};
    let map = Reply::Map(vec![(Reply::text("proto"), Reply::Integer(3))]);
    let cases: [(Reply, &[u8], &[u8]); 8] = [
        (Reply::OK, b"+OK\r\n", b"+OK\r\n"),
        (
            Reply::error("ERR bad\r\nthing"),
            b"-ERR bad  thing\r\n",
            b"-ERR bad  thing\r\n",
        ),
        (Reply::Integer(-42), b":-42\r\n", b":-42\r\n"),
        (
            Reply::Integer(i64::MIN),
            b":-9223372036854775808\r\n",
            b":-9223372036854775808\r\n",
        ),
        (Reply::bulk(&b"hi"[..]), b"$2\r\nhi\r\n", b"$2\r\nhi\r\n"),
        (Reply::Null, b"$-1\r\n", b"_\r\n"),
        (
            Reply::Array(vec![Reply::Integer(1), Reply::Null]),
            b"*2\r\n:1\r\n$-1\r\n",
            b"*2\r\n:1\r\n_\r\n",
        ),
        (
            map,
            b"*2\r\n$5\r\nproto\r\n:3\r\n",
            b"%1\r\n$5\r\nproto\r\n:3\r\n",
        ),
    ];
    for (reply, resp2, resp3) in cases {
        assert_eq!(encoded(&reply, Resp2), resp2, "{reply:?}");
        assert_eq!(encoded(&reply, Resp3), resp3, "{reply:?}");
    }
}

#[test]
fn replies_parse_back() {
    let reply = Reply::Array(vec![
        Reply::OK,
        Reply::error("ERR x"),
        Reply::Integer(7),
        Reply::bulk(&b"a\r\nb"[..]),
        Reply::Null,
        Reply::Map(vec![(Reply::text("k"), Reply::Array(vec![]))]),
    ]);
    let wire = encoded(&reply, ProtocolVersion::Resp3);
    assert_eq!(parse_reply(&wire, &limits()), Ok(Some((reply, wire.len()))));
    for cut in 0..wire.len() {
        assert_eq!(parse_reply(&wire[..cut], &limits()), Ok(None));
        assert_eq!(skip_reply(&wire[..cut], &limits()), Ok(None));
    }
    assert_eq!(
        skip_reply(b"-ERR no\r\n:1\r\n", &limits()),
        Ok(Some((ReplyKind::Error, 9)))
    );
    // RESP3 extras map onto the nearest variant (a boolean is one).
    let extras = b"*4\r\n#t\r\n(12\r\n>1\r\n+a\r\n|1\r\n+a\r\n+b\r\n:2\r\n";
    let (parsed, _) = parse_reply(extras, &limits()).unwrap().unwrap();
    assert_eq!(
        parsed,
        Reply::Array(vec![
            Reply::Boolean(true),
            Reply::bulk(&b"12"[..]),
            Reply::Array(vec![Reply::simple("a")]),
            Reply::Integer(2),
        ])
    );
    let deep = "*1\r\n".repeat(40);
    assert!(matches!(
        parse_reply(deep.as_bytes(), &limits()),
        Err(ProtocolError::NestingTooDeep { .. })
    ));
    assert_eq!(
        parse_reply(b"?\r\n", &limits()),
        Err(ProtocolError::UnknownReplyType(b'?'))
    );
}

/// `wire` cut at the given points (taken modulo its length + 1), in order: what a server's reads
/// might deliver.
fn pieces<'a>(wire: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut boundaries: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    boundaries.push(wire.len());
    boundaries.sort_unstable();
    let mut fed = 0;
    boundaries
        .into_iter()
        .map(|end| {
            let piece = &wire[fed..end];
            fed = end;
            piece
        })
        .collect()
}

/// Feeds `wire` to one decoder in pieces, appending to a buffer as a server would, and returns
/// the frames.
fn decode_in_chunks(wire: &[u8], cuts: &[usize]) -> Vec<Frame> {
    let mut decoder = Decoder::new(limits());
    let mut buffer = Vec::new();
    let mut frames = Vec::new();
    for piece in pieces(wire, cuts) {
        buffer.extend_from_slice(piece);
        while let Some((frame, used)) = decoder.decode(&buffer).expect("valid input") {
            frames.push(frame);
            buffer.drain(..used);
        }
    }
    assert!(buffer.is_empty());
    frames
}

/// [`decode_in_chunks`] with [`Decoder::decode_split`]: frames split off a `BytesMut` that keeps
/// receiving, the earlier frames still alive (as a server's requests in flight are).
fn decode_split_in_chunks(wire: &[u8], cuts: &[usize]) -> Vec<Frame> {
    let mut decoder = Decoder::new(limits());
    let mut buffer = BytesMut::with_capacity(16);
    let mut frames = Vec::new();
    for piece in pieces(wire, cuts) {
        buffer.extend_from_slice(piece);
        while let Some(frame) = decoder.decode_split(&mut buffer).expect("valid input") {
            frames.push(frame);
        }
    }
    assert!(buffer.is_empty());
    frames
}

fn arb_frame() -> impl Strategy<Value = (bool, Vec<Vec<u8>>)> {
    prop_oneof![
        // Multibulk: any bytes.
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6)
            .prop_map(|a| (false, a)),
        // Inline: words without separators or quotes.
        prop::collection::vec("[a-zA-Z0-9:_.-]{1,12}", 1..6)
            .prop_map(|words| (true, words.into_iter().map(String::into_bytes).collect())),
    ]
}

proptest! {
    #[test]
    fn random_frames_split_anywhere_parse_identically(
        frames in prop::collection::vec(arb_frame(), 1..8),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut wire = Vec::new();
        for (inline, parts) in &frames {
            if *inline {
                let line: Vec<String> =
                    parts.iter().map(|p| String::from_utf8(p.clone()).unwrap()).collect();
                wire.extend_from_slice(line.join(" ").as_bytes());
                wire.extend_from_slice(b"\r\n");
            } else {
                wire.extend_from_slice(&request(parts));
            }
        }
        let whole = decode_in_chunks(&wire, &[]);
        let split = decode_in_chunks(&wire, &cuts);
        prop_assert_eq!(&whole, &split);
        let split_off = decode_split_in_chunks(&wire, &cuts);
        prop_assert_eq!(&whole, &split_off);
        let want: Vec<Vec<Bytes>> = frames
            .iter()
            .map(|(_, parts)| parts.iter().map(|p| Bytes::from(p.clone())).collect())
            .collect();
        let got: Vec<Vec<Bytes>> = whole.into_iter().map(|f| f.args).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
        let small = Limits { bulk_bytes_max: 50, args_max: 8, inline_bytes_max: 60, request_bytes_max: 150, ..Limits::default() };
        let _ = parse(&data, &small);
        let _ = parse_reply(&data, &small);
    }

    #[test]
    fn replies_round_trip(values in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..20), 0..10)) {
        let reply = Reply::Array(values.into_iter().map(Reply::bulk).collect());
        for version in [ProtocolVersion::Resp2, ProtocolVersion::Resp3] {
            let wire = encoded(&reply, version);
            prop_assert_eq!(parse_reply(&wire, &limits()), Ok(Some((reply.clone(), wire.len()))));
        }
    }
}

#[test]
fn the_decoder_names_the_length_an_awaited_argument_needs() {
    let mut decoder = Decoder::new(limits());
    let wire = b"*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n";
    assert_eq!(decoder.awaited_len(), 0);
    // The second length line is not complete yet: unknown.
    assert_eq!(decoder.decode(&wire[..16]).unwrap(), None);
    assert_eq!(decoder.awaited_len(), 0);
    // Once it is, the whole argument's end (its CRLF included) is known.
    assert_eq!(decoder.decode(&wire[..20]).unwrap(), None);
    assert_eq!(decoder.awaited_len(), wire.len());
    let (frame, used) = decoder.decode(wire).unwrap().unwrap();
    assert_eq!(used, wire.len());
    assert_eq!(args(&frame), [&b"GET"[..], b"0123456789"]);
    assert_eq!(decoder.awaited_len(), 0, "reset at the frame boundary");
}

#[test]
fn the_encoded_length_bound_holds_for_every_reply_shape() {
    let replies = [
        Reply::OK,
        Reply::error("ERR x\r\ny"),
        Reply::Integer(i64::MIN),
        Reply::Integer(0),
        Reply::Null,
        Reply::bulk(vec![7u8; 1000]),
        Reply::Array(vec![Reply::Null, Reply::bulk(&b""[..]), Reply::Integer(-1)]),
        Reply::Map(vec![(
            Reply::text("k"),
            Reply::Array(vec![Reply::Null; 12]),
        )]),
        Reply::double(-1e300),
        Reply::double(f64::NEG_INFINITY),
        Reply::Set(vec![Reply::text("m"); 3]),
        Reply::Pairs(vec![(Reply::text("m"), Reply::double(0.1)); 5]),
        Reply::Pairs(vec![(Reply::Null, Reply::Null); 5]),
        Reply::Verbatim(Bytes::from_static(b"")),
        Reply::Verbatim(Bytes::from(vec![b'x'; 100])),
        Reply::Boolean(true),
        Reply::Boolean(false),
    ];
    for reply in &replies {
        for version in [ProtocolVersion::Resp2, ProtocolVersion::Resp3] {
            let len = encoded(reply, version).len();
            assert!(
                len <= reply.encoded_len_max(),
                "{reply:?} {version:?}: {len}"
            );
        }
    }
    // Close for large values, where it matters.
    let large = Reply::bulk(vec![0u8; 1 << 20]);
    assert!(large.encoded_len_max() <= (1 << 20) + 25);
}

/// Found by fuzzing (resp_decode): a line of exactly `inline_bytes_max` bytes was refused when
/// its bytes arrived split between the CR and the LF of its CRLF, and accepted when whole.
#[test]
fn an_inline_line_at_the_limit_is_accepted_however_its_crlf_arrives() {
    let limits = Limits {
        inline_bytes_max: 8,
        ..Limits::default()
    };
    let mut d = Decoder::new(limits);
    assert_eq!(d.decode(b"GET abcd\r"), Ok(None));
    let (frame, used) = d.decode(b"GET abcd\r\n").unwrap().unwrap();
    assert_eq!(args(&frame), [&b"GET"[..], b"abcd"]);
    assert_eq!(used, 10);
    // One byte more is still too long, whole or split.
    assert!(Decoder::new(limits).decode(b"GET abcde\r").is_err());
    assert!(parse(b"GET abcde\r\n", &limits).is_err());
}

/// Doubles as keel writes them: RESP2 a bulk string of the same text (what keel sent before it
/// had doubles), RESP3 Redis's `,` line.
#[test]
fn doubles_encode_in_resp2_and_resp3() {
    use ProtocolVersion::{Resp2, Resp3};
    let huge = format!("1{}", "0".repeat(300));
    for (value, text) in [
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
        (0.0, "0"),
        (-0.0, "0"),
        (0.1, "0.1"),
        (-2.5, "-2.5"),
        (3.0, "3"),
        (1e300, huge.as_str()),
        (0.1 + 0.2, "0.30000000000000004"),
    ] {
        let reply = Reply::double(value);
        let resp2 = format!("${}\r\n{text}\r\n", text.len());
        assert_eq!(encoded(&reply, Resp2), resp2.as_bytes(), "{value}");
        assert_eq!(
            encoded(&reply, Resp3),
            format!(",{text}\r\n").as_bytes(),
            "{value}"
        );
        // The RESP2 bytes are exactly the bulk string keel answered with before.
        assert_eq!(encoded(&Reply::text(text), Resp2), resp2.as_bytes());
        // Shortest, yet the same number.
        if value.is_finite() {
            assert_eq!(text.parse::<f64>().unwrap(), value + 0.0);
        }
    }
}

#[test]
fn sets_pairs_and_verbatim_strings_encode_in_resp2_and_resp3() {
    use ProtocolVersion::{Resp2, Resp3};
    let set = Reply::Set(vec![Reply::text("a"), Reply::text("b")]);
    let pairs = Reply::Pairs(vec![
        (Reply::text("a"), Reply::double(1.5)),
        (Reply::text("b"), Reply::double(f64::INFINITY)),
    ]);
    let cases: [(Reply, &[u8], &[u8]); 6] = [
        (
            set,
            b"*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            b"~2\r\n$1\r\na\r\n$1\r\nb\r\n",
        ),
        (Reply::Set(vec![]), b"*0\r\n", b"~0\r\n"),
        (
            pairs,
            b"*4\r\n$1\r\na\r\n$3\r\n1.5\r\n$1\r\nb\r\n$3\r\ninf\r\n",
            b"*2\r\n*2\r\n$1\r\na\r\n,1.5\r\n*2\r\n$1\r\nb\r\n,inf\r\n",
        ),
        (Reply::Pairs(vec![]), b"*0\r\n", b"*0\r\n"),
        (
            Reply::Verbatim(Bytes::from_static(b"# Server\r\n")),
            b"$10\r\n# Server\r\n\r\n",
            b"=14\r\ntxt:# Server\r\n\r\n",
        ),
        (
            Reply::Verbatim(Bytes::new()),
            b"$0\r\n\r\n",
            b"=4\r\ntxt:\r\n",
        ),
    ];
    for (reply, resp2, resp3) in cases {
        assert_eq!(encoded(&reply, Resp2), resp2, "{reply:?}");
        assert_eq!(encoded(&reply, Resp3), resp3, "{reply:?}");
    }
}

/// What a follower relies on to relay a reply: each reply parses back from the protocol it was
/// encoded in into a reply that encodes to the same bytes again.
#[test]
fn every_reply_shape_relays_byte_for_byte_in_either_protocol() {
    let reply = Reply::Array(vec![
        Reply::OK,
        Reply::error("ERR x"),
        Reply::Integer(-7),
        Reply::bulk(&b"a\r\nb"[..]),
        Reply::Null,
        Reply::Map(vec![(Reply::text("k"), Reply::Set(vec![Reply::text("m")]))]),
        Reply::Pairs(vec![(Reply::text("m"), Reply::double(-0.25))]),
        Reply::Double(Bytes::from_static(b"0.10000000000000001")),
        Reply::double(f64::NEG_INFINITY),
        Reply::Verbatim(Bytes::from_static(b"line\r\n")),
        Reply::Set(vec![]),
    ]);
    for version in [ProtocolVersion::Resp2, ProtocolVersion::Resp3] {
        let wire = encoded(&reply, version);
        let (parsed, used) = parse_reply(&wire, &limits()).unwrap().unwrap();
        assert_eq!(used, wire.len());
        assert_eq!(encoded(&parsed, version), wire, "{version:?}");
    }
    // In RESP3 each type keeps its variant (pairs excepted: arrays of arrays on the wire).
    let wire = encoded(&reply, ProtocolVersion::Resp3);
    let (Reply::Array(parsed), _) = parse_reply(&wire, &limits()).unwrap().unwrap() else {
        panic!("an array");
    };
    let Reply::Array(items) = &reply else {
        unreachable!()
    };
    for (at, (item, back)) in items.iter().zip(&parsed).enumerate() {
        if !matches!(item, Reply::Pairs(_)) {
            assert_eq!(item, back, "item {at}");
        }
    }
}
