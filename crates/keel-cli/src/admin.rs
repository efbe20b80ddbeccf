//! `keel status`, `keel member`, `keel transfer`: RESP requests to running nodes.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use bytes::BytesMut;
use comfy_table::Table;
use keel_resp::Reply;
use keel_resp::{encode_request, parse_reply, Limits};

const TIMEOUT: Duration = Duration::from_secs(15);
/// How long `keel member add` waits for its reply: the leader waits for the new member to catch
/// up (`--catch-up-timeout-ms`, 60 s by default) before it promotes it and answers.
pub const MEMBER_ADD_TIMEOUT: Duration = Duration::from_secs(300);

/// Sends one request and reads one reply, waiting at most `wait` for it; with a `password`, the
/// connection first authenticates (`AUTH default password`).
fn request(
    addr: &str,
    args: &[String],
    wait: Duration,
    password: Option<&str>,
) -> Result<Reply, String> {
    let target = addr
        .to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr}: no address"))?;
    let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(2))
        .map_err(|e| format!("{addr}: {e}"))?;
    stream
        .set_read_timeout(Some(wait))
        .map_err(|e| e.to_string())?;
    if let Some(password) = password {
        let auth = ["AUTH".to_string(), "default".into(), password.to_string()];
        let reply = exchange(addr, &mut stream, &auth)?;
        if let Reply::Error(e) = reply {
            return Err(format!("{addr}: AUTH refused: {e}"));
        }
    }
    exchange(addr, &mut stream, args)
}

fn exchange(addr: &str, stream: &mut TcpStream, args: &[String]) -> Result<Reply, String> {
    let mut out = BytesMut::new();
    encode_request(args, &mut out);
    stream.write_all(&out).map_err(|e| format!("{addr}: {e}"))?;
    let mut input = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some((reply, _)) =
            parse_reply(&input, &Limits::default()).map_err(|e| format!("{addr}: {e}"))?
        {
            return Ok(reply);
        }
        let n = stream
            .read(&mut chunk)
            .map_err(|e| format!("{addr}: {e}"))?;
        if n == 0 {
            return Err(format!("{addr}: connection closed"));
        }
        input.extend_from_slice(&chunk[..n]);
    }
}

fn show(reply: &Reply) -> String {
    match reply {
        Reply::Simple(s) => s.to_string(),
        Reply::Error(e) => format!("(error) {e}"),
        Reply::Integer(n) => format!("(integer) {n}"),
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Null | Reply::NullArray => "(nil)".into(),
        other => format!("{other:?}"),
    }
}

/// Sends an admin command to the first node that answers; fails on an error reply.
pub fn command(addrs: &[String], args: &[String], password: Option<&str>) -> ExitCode {
    command_waiting(addrs, args, TIMEOUT, password)
}

/// [`command`], waiting up to `wait` for the reply.
pub fn command_waiting(
    addrs: &[String],
    args: &[String],
    wait: Duration,
    password: Option<&str>,
) -> ExitCode {
    let mut last = String::from("no address given");
    for addr in addrs {
        match request(addr, args, wait, password) {
            Ok(reply) => {
                println!("{}", show(&reply));
                return if reply.is_error() {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                };
            }
            Err(e) => last = e,
        }
    }
    eprintln!("keel: {last}");
    ExitCode::FAILURE
}

/// The `key:value` lines of an INFO reply.
fn fields(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .collect()
}

/// One row per node given: role, term, leader, commit, applied, lag behind the highest commit
/// index seen, clock offset from the leader's (`held` when it keeps the node from campaigning,
/// `outlier` for a leader a majority's clocks disagree with), digest.
pub fn status(addrs: &[String], password: Option<&str>) -> ExitCode {
    let mut rows = Vec::new();
    for addr in addrs {
        let reply = request(addr, &["RAFT.STATUS".to_string()], TIMEOUT, password);
        rows.push((addr.clone(), reply));
    }
    let commit_max = rows
        .iter()
        .filter_map(|(_, r)| match r {
            Ok(Reply::Bulk(b)) => fields(&String::from_utf8_lossy(b))
                .into_iter()
                .find(|(k, _)| *k == "commit_index")
                .and_then(|(_, v)| v.parse::<u64>().ok()),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut table = Table::new();
    table.set_header([
        "address", "node", "role", "term", "leader", "commit", "applied", "lag", "clock", "digest",
    ]);
    let mut ok = true;
    for (addr, reply) in rows {
        match reply {
            Ok(Reply::Bulk(b)) => {
                let text = String::from_utf8_lossy(&b).into_owned();
                let f = fields(&text);
                let get = |k: &str| {
                    f.iter()
                        .find(|(key, _)| *key == k)
                        .map_or("?", |(_, v)| *v)
                        .to_string()
                };
                let applied = get("applied_index");
                let lag = applied
                    .parse::<u64>()
                    .map_or("?".into(), |a| commit_max.saturating_sub(a).to_string());
                let mut role = get("role");
                if get("recovering") == "1" {
                    // Its disk lost entries it had acknowledged; it is fetching them back.
                    role.push_str(&format!(" recovering to {}", get("recovering_to_index")));
                }
                table.add_row([
                    addr,
                    get("node_id"),
                    role,
                    get("term"),
                    get("leader_id"),
                    get("commit_index"),
                    applied,
                    lag,
                    clock_cell(&get),
                    get("state_digest"),
                ]);
            }
            Ok(other) => {
                ok = false;
                table.add_row([addr, show(&other)]);
            }
            Err(e) => {
                ok = false;
                table.add_row([addr, format!("unreachable: {e}")]);
            }
        }
    }
    println!("{table}");
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The clock column of `keel status`: the offset from the leader's clock in ms, with what it
/// means for the node.
fn clock_cell(get: &dyn Fn(&str) -> String) -> String {
    let mut cell = match get("clock_offset_ms").as_str() {
        "" | "?" => "-".to_string(),
        ms => format!("{ms} ms"),
    };
    if get("campaigns_held") == "1" {
        cell.push_str(" held");
    }
    if get("clock_outlier") == "1" {
        cell.push_str(" outlier");
    }
    cell
}
