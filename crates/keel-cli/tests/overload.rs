//! Client-side overload bounds (issue 17), with real sockets against `keel serve` processes:
//! maxclients, the idle timeout, the total of all query buffers (with the process's RSS), the
//! output bound of a client that does not read (with the RSS), rate-limited accept errors,
//! maxclients fitted to the open file limit, and a flood of 20,000 connections that does not
//! keep a cluster from committing nor its leader's RSS from its bound.
//!
//! Every wait is a retry loop with a generous deadline; nothing asserts a latency.

mod process;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use keel_resp::Reply;
use process::{
    eventually, eventually_within, get, info_field, log_tail, raw_request, set, Cluster, Node,
    DEADLINE, IO_TIMEOUT,
};

const MIB: usize = 1024 * 1024;

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    stream
}

/// Sends `PING` and expects `+PONG`.
fn ping(stream: &mut TcpStream) {
    stream.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_line(stream), "+PONG");
}

/// One line of a reply (RESP's simple lines: status, error, integer).
fn read_line(stream: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            other => panic!("reading a reply line: {other:?} after {line:?}"),
        }
    }
    String::from_utf8(line[..line.len() - 2].to_vec()).unwrap()
}

/// Reads until the server closes the connection; the bytes read, and whether it ended in an
/// orderly close (rather than a reset).
fn read_to_close(stream: &mut TcpStream) -> (usize, bool) {
    let mut total = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return (total, true),
            Ok(n) => total += n,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (total, false),
            Err(e) => panic!("reading until the server closes: {e} after {total} bytes"),
        }
    }
}

/// An `INFO raft` field of `node`.
fn raft_field(node: &Node, key: &str) -> u64 {
    eventually(&format!("INFO {key} of node {}", node.id), || {
        node.info_u64(key)
    })
}

/// `INFO clients` fields (the process helper asks for `INFO raft`).
fn clients_field(node: &Node, key: &str) -> u64 {
    info_field(node.client_port, "clients", key)
}

/// The process's resident memory in bytes (`VmRSS` in `/proc/<pid>/status`).
fn rss_bytes(node: &Node) -> usize {
    let pid = node.pid().expect("node running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib * 1024
}

#[test]
fn maxclients_refuses_new_clients_and_spares_the_others_and_the_peers() {
    let cluster = Cluster::new("maxclients", &[1, 2, 3], &[], &["--maxclients", "6"]);
    let leader = cluster.leader();
    let follower = cluster.node([1, 2, 3].into_iter().find(|&id| id != leader).unwrap());
    assert_eq!(raft_field(follower, "leader_id"), leader);
    // Connections this test closed a moment ago (the INFO polls) may not be counted out yet.
    let mut held: Vec<TcpStream> = Vec::new();
    while held.len() < 6 {
        let stream = eventually("a place among the 6 clients", || {
            let mut stream = connect(follower.client_port);
            stream.write_all(b"PING\r\n").unwrap();
            match read_line(&mut stream).as_str() {
                "+PONG" => Some(stream),
                "-ERR max number of clients reached" => None,
                other => panic!("PING answered {other}"),
            }
        });
        held.push(stream);
    }

    // One more: Redis's error, then the connection is closed.
    let mut refused = connect(follower.client_port);
    assert_eq!(
        read_line(&mut refused),
        "-ERR max number of clients reached"
    );
    assert!(read_to_close(&mut refused).0 == 0);

    // The clients already connected are served, forwarded writes and reads included, and the
    // follower keeps replicating from the leader (its peer connections are not clients).
    held[0]
        .write_all(b"SET through-the-follower 1\r\n")
        .unwrap();
    assert_eq!(read_line(&mut held[0]), "+OK");
    set(cluster.node(leader), "through-the-leader", "2");
    held[1].write_all(b"GET through-the-leader\r\n").unwrap();
    assert_eq!(read_line(&mut held[1]), "$1");
    assert_eq!(read_line(&mut held[1]), "2");

    // A place freed is a place for the next client.
    drop(held.pop());
    eventually("a freed place to be taken", || {
        let mut stream = connect(follower.client_port);
        stream.write_all(b"PING\r\n").ok()?;
        (read_line(&mut stream) == "+PONG").then_some(())
    });
}

#[test]
fn idle_clients_are_closed_after_the_timeout_but_not_forwarding_connections() {
    let cluster = Cluster::new("idle", &[1, 2, 3], &[], &["--timeout", "1"]);
    let leader = cluster.leader();
    let follower = cluster.node([1, 2, 3].into_iter().find(|&id| id != leader).unwrap());

    let mut idle = connect(follower.client_port);
    ping(&mut idle);
    let started = Instant::now();
    assert_eq!(read_to_close(&mut idle).0, 0, "closed without a word");
    assert!(started.elapsed() >= Duration::from_millis(900));

    // A busy client is not idle. Its writes are forwarded to the leader over a connection that
    // is idle there meanwhile: the leader keeps it open, so the second write is not lost.
    let mut busy = connect(follower.client_port);
    busy.write_all(b"SET busy 1\r\n").unwrap();
    assert_eq!(read_line(&mut busy), "+OK");
    for _ in 0..8 {
        sleep(Duration::from_millis(300));
        ping(&mut busy);
    }
    busy.write_all(b"SET busy 2\r\n").unwrap();
    assert_eq!(read_line(&mut busy), "+OK");
    assert_eq!(get(cluster.node(leader), "busy").as_deref(), Some("2"));
}

#[test]
#[expect(clippy::too_many_lines)]
fn query_buffers_stay_within_their_total_and_give_memory_back() {
    // Room for eight 16 MiB partial requests and no ninth (the bound must hold one request of
    // the 128 MiB request limit).
    let total_bytes = 144 * MIB;
    let cluster = Cluster::new(
        "query-buffers",
        &[1],
        &[],
        &[
            "--client-query-buffer-total-bytes",
            &total_bytes.to_string(),
        ],
    );
    let node = cluster.node(1);
    set(node, "warm", "up");
    let baseline = rss_bytes(node);

    // Sixteen clients each start an ECHO of 16 MiB and send 15 MiB of it (ECHO: answered by
    // the node itself, so the test is about buffers, not the log).
    let header = format!("*2\r\n$4\r\nECHO\r\n${}\r\n", 16 * MIB);
    let body = vec![b'v'; 15 * MIB];
    let (mut holding, mut refused) = (Vec::new(), Vec::new());
    for _ in 0..16 {
        let mut stream = connect(node.client_port);
        stream.write_all(header.as_bytes()).unwrap();
        // The buffer for the whole argument is charged when its length arrives: a refusal
        // comes before the body is sent.
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut first = [0u8; 1];
        match stream.peek(&mut first) {
            Ok(1) => {
                let line = read_line(&mut stream);
                refused.push(line);
                continue;
            }
            Ok(_) => panic!("closed without a reply"),
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "{e}"
            ),
        }
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.write_all(&body).unwrap();
        holding.push(stream);
    }
    assert_eq!(holding.len(), 8, "refused: {refused:?}");
    for line in &refused {
        assert!(
            line.starts_with("-ERR client query buffers full")
                && line.contains(&format!("client-query-buffer-total-bytes ({total_bytes})")),
            "{line}"
        );
    }
    let charged = clients_field(node, "client_query_buffers_bytes") as usize;
    assert!(charged <= total_bytes, "{charged} bytes charged");
    // Everything sent has arrived once the server holds it: 8 x 15 MiB above the baseline.
    let during = eventually_within("the partial requests to arrive", DEADLINE, || {
        let rss = rss_bytes(node);
        (rss >= baseline + 8 * 15 * MIB).then_some(rss)
    });
    let margin = 48 * MIB;
    assert!(
        during <= baseline + total_bytes + margin,
        "RSS {during} > baseline {baseline} + total {total_bytes} + margin {margin}"
    );

    // One request completes: its buffer goes back to one read's size at once.
    let mut done = holding.pop().unwrap();
    done.write_all(&vec![b'v'; MIB]).unwrap();
    done.write_all(b"\r\n").unwrap();
    assert_eq!(read_line(&mut done), format!("${}", 16 * MIB));
    let mut echoed = vec![0u8; 16 * MIB + 2];
    done.read_exact(&mut echoed).unwrap();
    assert!(echoed[..16 * MIB].iter().all(|&b| b == b'v'));
    let after_one = clients_field(node, "client_query_buffers_bytes") as usize;
    assert!(
        after_one + 16 * MIB <= charged + 64 * 1024,
        "{charged} bytes charged before, {after_one} after one request completed"
    );

    // The clients leave: the buffers are freed, and the process gives the memory back.
    drop(holding);
    drop(done);
    eventually("the connections to be gone", || {
        (clients_field(node, "connected_clients") == 1).then_some(())
    });
    let after = eventually_within("the memory to come back", DEADLINE, || {
        let rss = rss_bytes(node);
        (rss <= baseline + 64 * MIB).then_some(rss)
    });
    eprintln!(
        "RSS: baseline {} MiB, 8 partial requests held {} MiB, after {} MiB",
        baseline / MIB,
        during / MIB,
        after / MIB
    );
}

#[test]
fn a_client_that_does_not_read_is_closed_at_its_output_bound() {
    let limit_bytes = 4 * MIB;
    let cluster = Cluster::new(
        "slow-reader",
        &[1],
        &[],
        &[
            "--client-output-buffer-limit-bytes",
            &limit_bytes.to_string(),
        ],
    );
    let node = cluster.node(1);
    let value = "x".repeat(MIB);
    set(node, "big", &value);
    let baseline = rss_bytes(node);

    // 200 GETs of 1 MiB, pipelined, and never a reply read.
    let mut slow = connect(node.client_port);
    let requests = "GET big\r\n".repeat(200);
    slow.write_all(requests.as_bytes()).unwrap();

    // Others are served meanwhile; the slow one is closed.
    let mut round = 0;
    let mut peak = 0;
    eventually("the client that does not read to be closed", || {
        peak = peak.max(rss_bytes(node));
        round += 1;
        set(node, "other", &round.to_string());
        assert_eq!(get(node, "other"), Some(round.to_string()));
        (clients_field(node, "connected_clients") == 1).then_some(())
    });
    // What the slow reader pinned: at most its output limit, beyond the allocator's slack.
    let bound = baseline + limit_bytes + keel_server::limits::RSS_MARGIN_BYTES;
    eprintln!(
        "slow reader: RSS baseline {} KiB, peak {} KiB, bound {} KiB",
        baseline / 1024,
        peak / 1024,
        bound / 1024
    );
    assert!(peak <= bound, "RSS peak {peak} > bound {bound}");
    let (read, _) = read_to_close(&mut slow);
    assert!(
        read < 200 * MIB,
        "{read} bytes: the client got every reply, it was not cut off"
    );

    // A reply larger than the bound by itself is refused, and the connection goes on.
    let mut client = connect(node.client_port);
    client
        .write_all(b"MGET big big big big big\r\nPING\r\n")
        .unwrap();
    let error = read_line(&mut client);
    assert!(
        error.starts_with("-ERR reply too large")
            && error.contains("client-output-buffer-limit-bytes"),
        "{error}"
    );
    assert_eq!(read_line(&mut client), "+PONG");
}

#[test]
fn accept_errors_are_logged_at_a_bounded_rate() {
    // The node's own accounting keeps clients within its descriptors (see the next test), so
    // the limit is lowered under the running node, below what it holds: every accept fails
    // (EMFILE) while clients wait.
    let mut cluster = Cluster::new("accept-errors", &[1], &[], &[]);
    let port = cluster.node(1).client_port;
    eventually("the node to serve", || {
        matches!(raw_request(port, &["PING"]), Ok(Reply::Simple(_))).then_some(())
    });
    let pid = cluster.node(1).pid().unwrap();
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let prlimit = |limit: usize| {
        let status = Command::new("prlimit")
            .arg(format!("--pid={pid}"))
            .arg(format!("--nofile={limit}:"))
            .status()
            .expect("prlimit (util-linux) is needed");
        assert!(status.success());
    };
    prlimit(open);
    let clients: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    let started = Instant::now();
    sleep(Duration::from_secs(3));
    let log_path = cluster.node(1).log.clone();
    let text = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("accepting a client connection failed"))
        .collect();
    let seconds = started.elapsed().as_secs() + 2;
    assert!(
        !lines.is_empty() && lines.len() as u64 <= seconds,
        "{} lines in about {seconds} s:\n{}",
        lines.len(),
        log_tail(&log_path)
    );
    assert!(
        lines
            .iter()
            .all(|l| l.contains("since the last report") && l.contains("WARN")),
        "{lines:?}"
    );
    // Descriptors back (the soft limit only was lowered), the node serves again.
    prlimit(open + 1_000);
    drop(clients);
    eventually("the node to serve again", || {
        matches!(raw_request(port, &["PING"]), Ok(Reply::Simple(_))).then_some(())
    });
    cluster.node_mut(1).assert_alive();
}

#[test]
fn maxclients_is_lowered_to_fit_the_open_file_limit() {
    let run_with_limit = |name: &str, limit: u32| {
        let mut cluster = Cluster::stopped(name, &[1], &[], &[]);
        let node = cluster.node_mut(1);
        let log = std::fs::File::create(&node.log).unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_keel"))
            .args(&node.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        (cluster, child)
    };
    // 400 descriptors: 121 for the node itself, 2 per client.
    let (cluster, mut child) = run_with_limit("fd-fit", 400);
    let node = cluster.node(1);
    assert_eq!(clients_field(node, "maxclients"), (400 - 121) / 2);
    let log = std::fs::read_to_string(&node.log).unwrap();
    assert!(
        log.contains("maxclients lowered from 10000 to 139")
            && log.contains("the open file limit (ulimit -n) is 400"),
        "{log}"
    );
    let _ = child.kill();
    let _ = child.wait();

    // Too few for one client: the node does not start, and says why.
    let (cluster, mut child) = run_with_limit("fd-refuse", 100);
    let status = eventually("the node to exit", || child.try_wait().unwrap());
    assert!(!status.success());
    let log = std::fs::read_to_string(&cluster.node(1).log).unwrap();
    assert!(
        log.contains("the open file limit (ulimit -n) of 100 is too low"),
        "{log}"
    );
}

/// Raises this process's soft open-file limit to its hard limit; returns the limit.
fn raise_own_nofile() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    limit.rlim_cur
}

#[test]
#[expect(clippy::too_many_lines)]
fn a_flood_of_connections_keeps_peers_flowing_and_memory_bounded() {
    const ATTEMPTS: usize = 20_000;
    const HELD: usize = 3_000;
    const MAXCLIENTS: usize = 2_000;
    let own_limit = raise_own_nofile();
    assert!(
        own_limit as usize >= HELD + 500,
        "the hard open file limit is {own_limit}: too low for this test"
    );
    let cluster = Cluster::new(
        "flood",
        &[1, 2, 3],
        &[],
        &["--maxclients", &MAXCLIENTS.to_string()],
    );
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let leader_port = cluster.node(leader).client_port;
    let follower_port = cluster.node(follower).client_port;
    set(cluster.node(follower), "warm", "up");
    let leader_pid = cluster.node(leader).pid().unwrap();
    let rss_of = move || {
        let status = std::fs::read_to_string(format!("/proc/{leader_pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .unwrap()
            * 1024
    };
    let baseline = rss_of();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Writes through a follower (forwarded to the leader, replicated to all) all along, on one
    // connection: its forwarding link to the leader is a client there too, opened before the
    // flood (a follower's new links are refused like any client while the leader is full).
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut stream = connect(follower_port);
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let key = format!("during-flood-{i}");
                let request = format!("SET {key} v\r\n");
                stream.write_all(request.as_bytes()).unwrap();
                let line = read_line(&mut stream);
                assert!(line == "+OK" || line.starts_with("-TRYAGAIN"), "{line}");
                if line == "+OK" {
                    acked.push((Instant::now(), key));
                }
                sleep(Duration::from_millis(20));
            }
            acked
        })
    };
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_of());
                sleep(Duration::from_millis(50));
            }
            peak
        })
    };

    // 20,000 connection attempts against the leader from four threads: one in five of the
    // first is held (3,000 in all, beyond maxclients), the others send PING and close at once.
    let started = Instant::now();
    let flooders: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let (mut held, mut failed) = (Vec::new(), 0);
                for i in 0..ATTEMPTS / 4 {
                    match TcpStream::connect(("127.0.0.1", leader_port)) {
                        Ok(mut stream) => {
                            let _ = stream.write_all(b"PING\r\n");
                            if i % 5 == 0 && held.len() < HELD / 4 {
                                held.push(stream);
                            }
                        }
                        Err(_) => failed += 1,
                    }
                }
                (held, failed)
            })
        })
        .collect();
    let mut held = Vec::new();
    let mut failed = 0;
    for flooder in flooders {
        let (h, f) = flooder.join().unwrap();
        held.extend(h);
        failed += f;
    }
    let flood_time = started.elapsed();
    // Hold them a while with the writes going on.
    sleep(Duration::from_secs(3));
    let flood_end = Instant::now();
    // Each held connection was served (PONG) or refused (maxclients reached).
    let (mut served, mut refused) = (0, 0);
    for stream in &mut held {
        match read_line(stream).as_str() {
            "+PONG" => served += 1,
            "-ERR max number of clients reached" => refused += 1,
            other => panic!("a held connection was answered {other}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writer.join().unwrap();
    let peak = sampler.join().unwrap();

    // (a) Writes through the follower kept being acknowledged during the flood.
    let during: Vec<&Instant> = acked
        .iter()
        .map(|(at, _)| at)
        .filter(|&&at| at >= started && at <= flood_end)
        .collect();
    let mut gaps: Vec<Duration> = during.windows(2).map(|w| *w[1] - *w[0]).collect();
    gaps.push(
        during
            .first()
            .map_or(flood_end - started, |&&at| at - started),
    );
    let longest = gaps.iter().max().copied().unwrap();
    assert!(
        during.len() >= 10 && longest < Duration::from_secs(5),
        "{} writes acknowledged during the flood, longest wait {longest:?}",
        during.len()
    );
    // (b) The cluster keeps a leader; every acknowledged write is there. The held connections
    // go first: if leadership moved during the flood (it may, on a loaded machine), the old
    // leader is still full and would refuse the INFO that finds the leader.
    let held_count = held.len();
    drop(held);
    let after = cluster.leader();
    for (_, key) in acked.iter().rev().take(20) {
        assert_eq!(get(cluster.node(after), key).as_deref(), Some("v"));
    }
    // (c) The leader's memory stays within the documented bound.
    let bound = baseline
        + MAXCLIENTS * keel_server::limits::IDLE_CLIENT_RSS_BYTES_MAX
        + keel_server::limits::RSS_MARGIN_BYTES;
    eprintln!(
        "flood: {ATTEMPTS} attempts ({failed} failed to connect) in {flood_time:?}; of {HELD} held, \
         {served} served and {refused} refused (maxclients {MAXCLIENTS}); {} writes acknowledged meanwhile, longest \
         wait {longest:?}; leader {leader} -> {after}; leader RSS baseline {} KiB, peak {} KiB, \
         bound {} KiB",
        during.len(),
        baseline / 1024,
        peak / 1024,
        bound / 1024
    );
    assert!(
        served <= MAXCLIENTS && served + refused == held_count && refused >= HELD - MAXCLIENTS,
        "{served} held connections served, {refused} refused"
    );
    assert!(peak <= bound, "RSS peak {peak} > bound {bound}");
}
