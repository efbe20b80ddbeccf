//! One benchmark connection: keeps `pipeline` requests in flight, reads and writes concurrently
//! (so a large pipeline can never deadlock against a server that is itself blocked writing
//! replies), times every reply.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{BenchConfig, Shared};
use keel_resp::{skip_reply, Limits, ReplyKind};

/// Latencies are recorded in microseconds up to an hour (beyond: saturated).
pub(crate) const LATENCY_US_MAX: u64 = 3_600_000_000;
const READ_CHUNK_BYTES: usize = 64 * 1024;
const KEY_PREFIX: &[u8] = b"key:";
const KEY_DIGITS: usize = 12;

pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("static bounds are valid")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Get,
    Set,
    /// `PEXPIRE key ttl` (recorded with the SETs, as a write).
    Expire,
}

/// What one connection does.
pub(crate) struct Plan {
    addr: String,
    pipeline: usize,
    reply_timeout: Duration,
    keys: u64,
    /// GET when a uniform draw in [0, 2^53) is below this.
    read_threshold: u64,
    /// A write is a PEXPIRE when a second draw is below this.
    expire_threshold: u64,
    expire_template: Vec<u8>,
    expire_key_at: usize,
    /// A complete GET request; the key digits start at `get_key_at`.
    get_template: Vec<u8>,
    get_key_at: usize,
    set_template: Vec<u8>,
    set_key_at: usize,
    rng: u64,
    reply_limits: Limits,
}

impl Plan {
    pub(crate) fn new(config: &BenchConfig, index: usize, addr: String) -> Self {
        let key = [KEY_PREFIX, &[b'0'; KEY_DIGITS][..]].concat();
        let value = vec![b'x'; config.value_size_bytes];
        let (get_template, get_key_at) = template(&[b"GET", &key]);
        let ttl = config.ttl_ms.to_string();
        let (set_template, set_key_at) = if config.ttl_ms > 0 {
            template(&[b"SET", &key, &value, b"PX", ttl.as_bytes()])
        } else {
            template(&[b"SET", &key, &value])
        };
        let (expire_template, expire_key_at) = template(&[b"PEXPIRE", &key, ttl.as_bytes()]);
        let reply_limits = Limits {
            // GET replies carry values written by anyone, not only by us: accept what a server
            // may hold, bounded all the same.
            bulk_bytes_max: Limits::default()
                .bulk_bytes_max
                .max(config.value_size_bytes),
            ..Limits::default()
        };
        Plan {
            addr,
            pipeline: config.pipeline,
            reply_timeout: config.reply_timeout,
            keys: config.keys,
            read_threshold: (config.read_ratio * (1u64 << 53) as f64) as u64,
            expire_threshold: (config.expire_ratio * (1u64 << 53) as f64) as u64,
            expire_template,
            expire_key_at,
            get_template,
            get_key_at,
            set_template,
            set_key_at,
            // Distinct, non-zero per connection.
            rng: splitmix(config.seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1,
            reply_limits,
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: fast, good enough to spread keys and mix operations.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Appends the next request to `out`.
    fn push_request(&mut self, out: &mut BytesMut) -> Op {
        let op = if (self.next_random() >> 11) < self.read_threshold {
            Op::Get
        } else if self.expire_threshold > 0 && (self.next_random() >> 11) < self.expire_threshold {
            Op::Expire
        } else {
            Op::Set
        };
        let key = self.next_random() % self.keys;
        let (template, key_at) = match op {
            Op::Get => (&self.get_template, self.get_key_at),
            Op::Set => (&self.set_template, self.set_key_at),
            Op::Expire => (&self.expire_template, self.expire_key_at),
        };
        let start = out.len();
        out.extend_from_slice(template);
        write_digits(&mut out[start + key_at..start + key_at + KEY_DIGITS], key);
        op
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Encodes `args` as a request and returns it with the offset of the key's digits (the second
/// argument, after its prefix).
fn template(args: &[&[u8]]) -> (Vec<u8>, usize) {
    let mut out = BytesMut::new();
    keel_resp::encode_request(args, &mut out);
    let key = args[1];
    let key_at = out
        .windows(key.len())
        .position(|w| w == key)
        .expect("the key is in the request");
    (out.to_vec(), key_at + KEY_PREFIX.len())
}

fn write_digits(slot: &mut [u8], mut n: u64) {
    for byte in slot.iter_mut().rev() {
        *byte = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// What one connection measured.
pub(crate) struct ConnectionTally {
    pub(crate) get_latency: Histogram<u64>,
    pub(crate) set_latency: Histogram<u64>,
    pub(crate) get_errors: u64,
    pub(crate) set_errors: u64,
    pub(crate) first_error: Option<String>,
    /// Why the connection stopped early, if it did.
    pub(crate) failure: Option<String>,
    /// Measured requests sent but never answered (the connection failed).
    pub(crate) lost: u64,
    pub(crate) finished_at: Instant,
}

struct InFlight {
    sent_at: Instant,
    op: Op,
    measured: bool,
}

pub(crate) async fn run(
    mut stream: TcpStream,
    mut plan: Plan,
    shared: Arc<Shared>,
) -> ConnectionTally {
    let mut outcome = ConnectionTally {
        get_latency: new_histogram(),
        set_latency: new_histogram(),
        get_errors: 0,
        set_errors: 0,
        first_error: None,
        failure: None,
        lost: 0,
        finished_at: Instant::now(),
    };
    let failure = drive(&mut stream, &mut plan, &shared, &mut outcome).await;
    if let Err((reason, lost)) = failure {
        outcome.failure = Some(format!("{}: {reason}", plan.addr));
        outcome.lost = lost;
    }
    outcome.finished_at = Instant::now();
    outcome
}

/// The request/reply loop. On failure returns the reason and the measured requests lost.
#[expect(clippy::too_many_lines)]
async fn drive(
    stream: &mut TcpStream,
    plan: &mut Plan,
    shared: &Shared,
    outcome: &mut ConnectionTally,
) -> Result<(), (String, u64)> {
    let (mut reader, mut writer) = stream.split();
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(plan.pipeline);
    let mut out = BytesMut::new();
    let mut written = 0usize;
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let lost = |in_flight: &VecDeque<InFlight>| in_flight.iter().filter(|r| r.measured).count();
    loop {
        while in_flight.len() < plan.pipeline {
            let now = Instant::now();
            let (send, measured) = shared.admit(now);
            if !send {
                break;
            }
            let op = plan.push_request(&mut out);
            in_flight.push_back(InFlight {
                sent_at: now,
                op,
                measured,
            });
        }
        if in_flight.is_empty() {
            return Ok(());
        }
        if input.capacity() - input.len() < READ_CHUNK_BYTES / 4 {
            input.reserve(READ_CHUNK_BYTES);
        }
        let pending = &out[written..];
        let io = async {
            if pending.is_empty() {
                reader.read_buf(&mut input).await.map(Progress::Read)
            } else {
                tokio::select! {
                    r = reader.read_buf(&mut input) => r.map(Progress::Read),
                    w = writer.write(pending) => w.map(Progress::Wrote),
                }
            }
        };
        let progress = match tokio::time::timeout(plan.reply_timeout, io).await {
            Err(_) => {
                let reason = format!("no reply within {:?}", plan.reply_timeout);
                return Err((reason, lost(&in_flight) as u64));
            }
            Ok(Err(e)) => return Err((e.to_string(), lost(&in_flight) as u64)),
            Ok(Ok(progress)) => progress,
        };
        match progress {
            Progress::Read(0) | Progress::Wrote(0) => {
                return Err((
                    "connection closed by the server".into(),
                    lost(&in_flight) as u64,
                ));
            }
            Progress::Wrote(n) => {
                written += n;
                if written == out.len() {
                    out.clear();
                    written = 0;
                }
            }
            Progress::Read(_) => loop {
                let (kind, used) = match skip_reply(&input, &plan.reply_limits) {
                    Ok(Some(reply)) => reply,
                    Ok(None) => break,
                    Err(e) => {
                        let reason = format!("unparseable reply: {e}");
                        return Err((reason, lost(&in_flight) as u64));
                    }
                };
                let Some(request) = in_flight.pop_front() else {
                    return Err(("a reply to no request".into(), 0));
                };
                if request.measured {
                    record(outcome, &request, kind, &input[..used], Instant::now());
                    shared.completed.fetch_add(1, Ordering::Relaxed);
                }
                input.advance(used);
            },
        }
    }
}

enum Progress {
    Read(usize),
    Wrote(usize),
}

fn record(
    outcome: &mut ConnectionTally,
    request: &InFlight,
    kind: ReplyKind,
    reply: &[u8],
    now: Instant,
) {
    let micros = now.duration_since(request.sent_at).as_micros();
    let micros = u64::try_from(micros)
        .unwrap_or(u64::MAX)
        .clamp(1, LATENCY_US_MAX);
    let (histogram, errors) = match request.op {
        Op::Get => (&mut outcome.get_latency, &mut outcome.get_errors),
        Op::Set | Op::Expire => (&mut outcome.set_latency, &mut outcome.set_errors),
    };
    histogram.saturating_record(micros);
    if kind == ReplyKind::Error {
        *errors += 1;
        if outcome.first_error.is_none() {
            // The error line without its `-` and CRLF.
            let text = reply.get(1..reply.len().saturating_sub(2)).unwrap_or(reply);
            outcome.first_error = Some(String::from_utf8_lossy(text).into_owned());
        }
    }
}
