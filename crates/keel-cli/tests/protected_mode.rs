//! Protected mode, as Redis has it, with real sockets: a node without `requirepass` whose
//! client listener is reachable from other hosts serves only loopback clients and the cluster's
//! members' hosts, answering the others Redis's `-DENIED ...` before closing.
//!
//! A client from "another host" is this machine connecting to one of its own non-loopback
//! addresses (the kernel then uses that address as the source). A machine without one skips
//! these tests, saying so.

mod process;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use keel_resp::Reply;
use process::{eventually, raw_request, set, Cluster, IO_TIMEOUT};

/// Redis 7's first sentences; keel's remedies follow.
const DENIED_START: &str = "-DENIED Redis is running in protected mode because protected mode \
     is enabled and no password is set for the default user. In this mode connections are only \
     accepted from the loopback interface.";

/// A non-loopback IPv4 address of this machine that a listener can bind, if there is one.
fn external_ip() -> Option<IpAddr> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show", "scope", "global"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let cidr = line
                .split_whitespace()
                .skip_while(|w| *w != "inet")
                .nth(1)?;
            cidr.split('/').next()?.parse::<IpAddr>().ok()
        })
        .find(|ip| !ip.is_loopback() && std::net::TcpListener::bind((*ip, 0)).is_ok())
}

/// Sends one request from `ip` to `port` on this machine (the source is `ip`); the first reply
/// line and whether the server closed the connection after it.
fn from_host(ip: IpAddr, port: u16, request: &str) -> (String, bool) {
    let mut stream = TcpStream::connect((ip, port)).unwrap();
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    // A refused client may be closed before its request is read: the write may fail.
    let _ = stream.write_all(request.as_bytes());
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => bytes.push(byte[0]),
            other => panic!("reading a reply: {other:?} after {bytes:?}"),
        }
    }
    let line = String::from_utf8(bytes[..bytes.len() - 2].to_vec()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let closed = match stream.read(&mut byte) {
        Ok(0) => true,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        _ => false,
    };
    (line, closed)
}

fn config_get(port: u16, name: &str) -> String {
    match raw_request(port, &["CONFIG", "GET", name]).unwrap() {
        Reply::Array(pair) => match &pair[..] {
            [_, Reply::Bulk(value)] => String::from_utf8_lossy(value).into_owned(),
            other => panic!("CONFIG GET {name}: {other:?}"),
        },
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

#[test]
fn clients_from_other_hosts_are_denied_without_a_password() {
    let Some(ip) = external_ip() else {
        eprintln!("skipped: this machine has no non-loopback address to connect from");
        return;
    };
    let mut cluster = Cluster::stopped("protected", &[1], &[], &[]);
    let node = cluster.node_mut(1);
    let port = node.client_port;
    // Reachable from every interface; the only member is on loopback.
    node.set_arg("--client-addr", &format!("0.0.0.0:{port}"));
    node.spawn();
    eventually("the node to serve", || {
        matches!(raw_request(port, &["PING"]), Ok(Reply::Simple(_))).then_some(())
    });

    let (line, closed) = from_host(ip, port, "PING\r\n");
    assert!(line.starts_with(DENIED_START), "{line}");
    assert!(line.contains("--protected-mode no") && line.contains("--requirepass"));
    assert!(
        line.ends_with("start accepting connections from the outside."),
        "{line}"
    );
    assert!(closed, "the denied connection stays open");
    // Loopback clients are served, and see the setting.
    assert_eq!(
        raw_request(port, &["PING"]).unwrap(),
        Reply::Simple("PONG".into())
    );
    assert_eq!(config_get(port, "protected-mode"), "yes");

    // protected-mode no: everyone is served.
    let node = cluster.node_mut(1);
    node.kill();
    node.set_arg("--protected-mode", "no");
    node.spawn();
    let (line, closed) = eventually("PING from another host", || {
        std::panic::catch_unwind(|| from_host(ip, port, "PING\r\n")).ok()
    });
    assert_eq!((line.as_str(), closed), ("+PONG", false));
    assert_eq!(config_get(port, "protected-mode"), "no");

    // With a password, protected mode does not apply: the password guards every client.
    let node = cluster.node_mut(1);
    node.kill();
    node.set_arg("--protected-mode", "yes");
    node.set_arg("--requirepass", "secret");
    node.spawn();
    let (line, _) = eventually("PING from another host", || {
        std::panic::catch_unwind(|| from_host(ip, port, "PING\r\n")).ok()
    });
    assert_eq!(line, "-NOAUTH Authentication required.");
}

#[test]
fn followers_forward_from_members_hosts_in_protected_mode() {
    let Some(ip) = external_ip() else {
        eprintln!("skipped: this machine has no non-loopback address to connect from");
        return;
    };
    let mut cluster = Cluster::stopped("protected-forward", &[1, 2, 3], &[], &[]);
    // Every node listens on all interfaces and tells the others to reach its clients at the
    // non-loopback address: forwarded requests arrive from that host, a member's.
    for node in &mut cluster.nodes {
        let port = node.client_port;
        node.set_arg("--client-addr", &format!("0.0.0.0:{port}"));
        node.set_arg("--advertise-client-addr", &format!("{ip}:{port}"));
        node.spawn();
    }
    let leader = cluster.leader();
    for id in [1, 2, 3].into_iter().filter(|&id| id != leader) {
        set(cluster.node(id), &format!("forwarded-by-{id}"), "ok");
    }
    let leader_node = cluster.node(leader);
    for id in [1, 2, 3].into_iter().filter(|&id| id != leader) {
        let (line, closed) = from_host(
            ip,
            leader_node.client_port,
            &format!("GET forwarded-by-{id}\r\n"),
        );
        assert_eq!((line.as_str(), closed), ("$2", false));
    }
    let log = std::fs::read_to_string(&leader_node.log).unwrap();
    assert!(!log.contains("protected mode: refused"), "{log}");
}
