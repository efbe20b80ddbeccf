//! INFO's counters and replication section on real nodes: requests counted per command (with
//! rejections and errors apart) on the node that holds the connection, connections and bytes
//! counted, CONFIG RESETSTAT zeroing them, and the Raft roles shown as Redis's master / slave.

mod process;

use keel_resp::Reply;
use process::{eventually, raw_request, Cluster};

/// `INFO <section>` on `port`, as text.
fn info(port: u16, section: &str) -> String {
    match raw_request(port, &["INFO", section]) {
        Ok(Reply::Bulk(text)) => String::from_utf8(text.to_vec()).unwrap(),
        other => panic!("INFO {section}: {other:?}"),
    }
}

/// The value of `key` in `text` (`key:value` lines).
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
}

fn number(text: &str, key: &str) -> u64 {
    field(text, key)
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .parse()
        .unwrap()
}

#[test]
#[expect(clippy::too_many_lines)]
fn counters_replication_roles_and_resetstat() {
    let cluster = Cluster::new("info", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let leader_port = cluster.node(leader).client_port;
    let port = cluster.node(follower).client_port;

    // Writes through the follower (forwarded), a read, a rejected and a failed command, an
    // unknown one.
    for i in 0..3 {
        let key = format!("k{i}");
        eventually("a forwarded SET", || {
            matches!(raw_request(port, &["SET", &key, "v"]), Ok(Reply::Simple(_))).then_some(())
        });
    }
    assert!(matches!(
        raw_request(port, &["GET", "k0"]),
        Ok(Reply::Bulk(_))
    ));
    assert!(matches!(
        raw_request(port, &["GET", "a", "b"]),
        Ok(Reply::Error(_))
    ));
    assert!(matches!(
        raw_request(port, &["INCR", "k0"]),
        Ok(Reply::Error(_))
    ));
    assert!(matches!(
        raw_request(port, &["NOSUCH"]),
        Ok(Reply::Error(_))
    ));

    let commands = info(port, "commandstats");
    let set = field(&commands, "cmdstat_set").expect("cmdstat_set");
    assert!(set.starts_with("calls=3,usec="), "{set}");
    assert!(set.ends_with(",rejected_calls=0,failed_calls=0"), "{set}");
    let get = field(&commands, "cmdstat_get").expect("cmdstat_get");
    assert!(get.starts_with("calls=1,") && get.ends_with(",rejected_calls=1,failed_calls=0"));
    let incr = field(&commands, "cmdstat_incr").expect("cmdstat_incr");
    assert!(incr.ends_with(",rejected_calls=0,failed_calls=1"), "{incr}");
    let errors = info(port, "errorstats");
    assert_eq!(field(&errors, "errorstat_ERR"), Some("count=3"), "{errors}");

    let stats = info(port, "stats");
    // Every request so far came on a connection of its own.
    assert!(number(&stats, "total_connections_received") >= 9, "{stats}");
    assert!(number(&stats, "total_commands_processed") >= 5, "{stats}");
    assert!(number(&stats, "total_net_input_bytes") > 100, "{stats}");
    assert!(number(&stats, "total_net_output_bytes") > 100, "{stats}");
    assert_eq!(number(&stats, "total_error_replies"), 3, "{stats}");
    // CPU time is counted in scheduler ticks on many kernels: a node that started in a few
    // milliseconds may not have been charged one yet. Some work first, then the sum must show.
    for _ in 0..300 {
        raw_request(port, &["PING"]).expect("PONG");
    }
    let cpu = info(port, "cpu");
    let user: f64 = field(&cpu, "used_cpu_user").unwrap().parse().unwrap();
    let sys: f64 = field(&cpu, "used_cpu_sys").unwrap().parse().unwrap();
    assert!(user >= 0.0 && sys >= 0.0 && user + sys > 0.0, "{cpu}");

    // Raft roles as Redis's: the leader a master with both followers, a follower its slave.
    let replication = eventually("the leader hears from both followers", || {
        let text = info(leader_port, "replication");
        (field(&text, "connected_slaves") == Some("2")).then_some(text)
    });
    assert_eq!(field(&replication, "role"), Some("master"));
    let slave0 = field(&replication, "slave0").unwrap();
    assert!(slave0.starts_with("ip=127.0.0.1,port="), "{slave0}");
    let replication = info(port, "replication");
    assert_eq!(field(&replication, "role"), Some("slave"));
    assert_eq!(
        field(&replication, "master_port"),
        Some(&*leader_port.to_string())
    );
    assert_eq!(field(&replication, "master_link_status"), Some("up"));

    // RESETSTAT zeroes everything; only itself is counted after.
    assert_eq!(
        raw_request(port, &["CONFIG", "RESETSTAT"]),
        Ok(Reply::simple("OK"))
    );
    let commands = info(port, "commandstats");
    assert_eq!(field(&commands, "cmdstat_set"), None, "{commands}");
    assert!(
        field(&commands, "cmdstat_config|resetstat").is_some(),
        "{commands}"
    );
    assert_eq!(info(port, "errorstats"), "# Errorstats\r\n");
    let stats = info(port, "stats");
    assert_eq!(number(&stats, "total_error_replies"), 0, "{stats}");
    assert!(number(&stats, "total_connections_received") <= 3, "{stats}");
}
