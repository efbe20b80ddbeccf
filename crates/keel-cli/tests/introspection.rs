//! The node's introspection commands over real sockets, on a `keel serve` process: CLIENT KILL
//! (its effect is visible to the next request, never after it), CONFIG GET of the listener.

mod process;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use keel_resp::Reply;
use keel_resp::{encode_request, parse_reply, Limits};
use process::{raw_request, Cluster};

/// A connection that reads replies one at a time.
struct Client {
    stream: TcpStream,
    input: Vec<u8>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        Client {
            stream,
            input: Vec::new(),
        }
    }

    fn send(&mut self, requests: &[&[&str]]) {
        let mut out = bytes::BytesMut::new();
        for args in requests {
            encode_request(args, &mut out);
        }
        self.stream.write_all(&out).unwrap();
    }

    /// The next reply, or `None` once the server has closed the connection.
    fn read(&mut self) -> Option<Reply> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((reply, used)) = parse_reply(&self.input, &Limits::default()).unwrap() {
                self.input.drain(..used);
                return Some(reply);
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    fn request(&mut self, args: &[&str]) -> Reply {
        self.send(&[args]);
        self.read().expect("a reply")
    }
}

fn connected_clients(client: &mut Client) -> u64 {
    let Reply::Bulk(text) = client.request(&["INFO", "clients"]) else {
        panic!("INFO answers a bulk string");
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("connected_clients in INFO clients")
}

#[test]
fn client_kill_takes_effect_before_its_reply_and_nothing_after_it_is_served() {
    let cluster = Cluster::new("introspection-kill", &[1], &[], &[]);
    let port = cluster.node(1).client_port;
    cluster.leader();
    // Repeated: the outcome must not depend on how the node's tasks happen to be scheduled.
    for round in 0..20 {
        let mut me = Client::connect(port);
        let mut others: Vec<Client> = (0..3).map(|_| Client::connect(port)).collect();
        for other in &mut others {
            assert_eq!(other.request(&["PING"]), Reply::PONG);
        }
        let before = connected_clients(&mut me);
        assert_eq!(
            me.request(&["CLIENT", "KILL", "SKIPME", "yes"]),
            Reply::Integer(before as i64 - 1),
            "round {round}"
        );
        // The killed connections are gone by the time CLIENT KILL answers.
        assert_eq!(connected_clients(&mut me), 1, "round {round}");
        for other in &mut others {
            assert_eq!(
                other.read(),
                None,
                "round {round}: a killed connection is closed"
            );
        }
        // Killing itself: its reply comes, and a request sent right behind it in the same
        // write is never served.
        me.send(&[&["CLIENT", "KILL", "SKIPME", "no"], &["PING"]]);
        assert_eq!(me.read(), Some(Reply::Integer(1)), "round {round}");
        assert_eq!(me.read(), None, "round {round}: nothing after the kill");
        // And one sent after its reply was read is not served either.
        let mut again = Client::connect(port);
        assert_eq!(
            again.request(&["CLIENT", "KILL", "SKIPME", "no"]),
            Reply::Integer(1)
        );
        let _ = again.stream.write_all(b"PING\r\n");
        assert_eq!(again.read(), None, "round {round}: nothing after the kill");
    }
}

#[test]
fn config_get_reports_the_client_listener() {
    let cluster = Cluster::new("introspection-config", &[1], &[], &[]);
    let port = cluster.node(1).client_port;
    cluster.leader();
    let reply = raw_request(port, &["CONFIG", "GET", "port", "bind"]).unwrap();
    let Reply::Array(fields) = reply else {
        panic!("CONFIG GET answers a flat array in RESP2: {reply:?}");
    };
    assert!(
        fields.contains(&Reply::text(port.to_string())),
        "{fields:?}"
    );
    assert!(fields.contains(&Reply::text("127.0.0.1")), "{fields:?}");
    let other = (port + 1).to_string();
    match raw_request(port, &["CONFIG", "SET", "port", &other]).unwrap() {
        Reply::Error(text) => assert!(
            text.starts_with(
                "ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen \
                 on this port"
            ),
            "{text}"
        ),
        other => panic!("a port change is refused: {other:?}"),
    }
    assert_eq!(
        raw_request(port, &["CONFIG", "SET", "port", &port.to_string()]).unwrap(),
        Reply::OK
    );
}

/// The next MONITOR line (without its time), read raw: a line is a simple string.
fn monitor_line(client: &mut Client) -> String {
    match client.read() {
        Some(Reply::Simple(line)) => {
            let (time, rest) = line.split_once(' ').expect("time, then the rest");
            assert!(time.parse::<f64>().is_ok(), "{line}");
            rest.to_string()
        }
        other => panic!("a MONITOR line: {other:?}"),
    }
}

#[test]
fn monitor_shows_a_node_s_own_clients_commands_on_leader_and_follower() {
    let cluster = Cluster::new("introspection-monitor", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    for id in [leader, follower] {
        let port = cluster.node(id).client_port;
        let mut monitor = Client::connect(port);
        assert_eq!(monitor.request(&["MONITOR"]), Reply::OK);
        let mut client = Client::connect(port);
        let addr = match client.request(&["CLIENT", "INFO"]) {
            Reply::Bulk(info) => String::from_utf8_lossy(&info)
                .split(' ')
                .find_map(|f| f.strip_prefix("addr=").map(str::to_string))
                .unwrap(),
            other => panic!("CLIENT INFO: {other:?}"),
        };
        assert_eq!(client.request(&["SET", "foo", "b\"ar\n"]), Reply::OK);
        assert_eq!(client.request(&["GET", "foo"]), Reply::text("b\"ar\n"));
        assert_eq!(client.request(&["MULTI"]), Reply::OK);
        assert_eq!(
            client.request(&["SET", "foo", "bar"]),
            Reply::Simple("QUEUED".into())
        );
        assert!(matches!(client.request(&["EXEC"]), Reply::Array(_)));
        let expected = [
            r#""CLIENT" "INFO""#,
            r#""SET" "foo" "b\"ar\n""#,
            r#""GET" "foo""#,
            r#""MULTI""#,
            r#""SET" "foo" "bar""#,
            r#""EXEC""#,
        ];
        for shown in expected {
            assert_eq!(
                monitor_line(&mut monitor),
                format!("[0 {addr}] {shown}"),
                "node {id}"
            );
        }
        // A monitor may not read or write keys; its other commands are answered.
        let refused = monitor.request(&["GET", "foo"]);
        assert_eq!(
            refused,
            Reply::Error("ERR Replica can't interact with the keyspace".into())
        );
    }
}

#[test]
fn a_monitor_that_does_not_read_is_disconnected_and_never_slows_the_node() {
    let limit = 1 << 20;
    let cluster = Cluster::new(
        "introspection-monitor-bound",
        &[1],
        &[],
        &["--client-output-buffer-limit-bytes", &limit.to_string()],
    );
    let port = cluster.node(1).client_port;
    cluster.leader();
    let mut monitor = Client::connect(port);
    assert_eq!(monitor.request(&["MONITOR"]), Reply::OK);
    // Far more than the limit and the sockets' buffers take, while the monitor reads nothing.
    let value = "x".repeat(64 << 10);
    let mut client = Client::connect(port);
    let writes = 512;
    for _ in 0..writes / 64 {
        let requests: Vec<[&str; 3]> = (0..64).map(|_| ["SET", "k", value.as_str()]).collect();
        let requests: Vec<&[&str]> = requests.iter().map(|r| &r[..]).collect();
        client.send(&requests);
        for _ in 0..64 {
            assert_eq!(client.read(), Some(Reply::OK));
        }
    }
    // The monitor was closed: what it gets ends well before every line was sent.
    let mut received = 0usize;
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        match monitor.stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => received += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the monitor's connection is closed, not stalled: {e}"),
        }
    }
    assert!(received < writes * value.len(), "{received} bytes");
    assert_eq!(raw_request(port, &["PING"]).unwrap(), Reply::PONG);
}
