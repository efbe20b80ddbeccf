use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::connection::stats::{CommandStat, ServerStats};
use crate::connection::{ClientConnection, Dispatch, NodeInfo};
use keel_resp::{Limits, Reply};

fn args(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|w| Bytes::from(w.to_string()))
        .collect()
}

fn follower() -> NodeReport {
    NodeReport {
        node_id: 2,
        role: "follower".into(),
        leader_id: Some(1),
        applied_index: 99,
        last_log_index: 101,
        members: vec![
            MemberInfo {
                id: 1,
                peer_addr: "10.0.0.1:7001".into(),
                client_addr: "10.0.0.1:6001".into(),
                voter: true,
            },
            MemberInfo {
                id: 2,
                peer_addr: "10.0.0.2:7002".into(),
                client_addr: "10.0.0.2:6002".into(),
                voter: true,
            },
        ],
        ..NodeReport::default()
    }
}

fn section(text: &str, header: &str) -> String {
    let start = text
        .find(&format!("# {header}\r\n"))
        .unwrap_or_else(|| panic!("no {header} in {text}"));
    let rest = &text[start..];
    match rest.find("\r\n\r\n") {
        Some(end) => rest[..end + 2].to_string(),
        None => rest.to_string(),
    }
}

fn headers(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.strip_prefix("# ")).collect()
}

#[test]
fn default_leaves_out_commandstats_all_and_everything_give_every_section() {
    let status = NodeReport::default();
    let default = [
        "Server",
        "Clients",
        "Memory",
        "Stats",
        "Replication",
        "CPU",
        "Errorstats",
        "Raft",
        "Keyspace",
    ];
    assert_eq!(headers(&render(&status, &[])), default);
    assert_eq!(headers(&render(&status, &args("default"))), default);
    let mut all = default.to_vec();
    all.insert(6, "Commandstats");
    assert_eq!(headers(&render(&status, &args("all"))), all);
    assert_eq!(headers(&render(&status, &args("EVERYTHING"))), all);
    assert_eq!(
        headers(&render(&status, &args("commandstats CPU nosuch"))),
        ["CPU", "Commandstats"]
    );
    assert_eq!(
        headers(&render(&status, &args("default commandstats"))).len(),
        10
    );
}

#[test]
fn stats_section_has_redis_field_names() {
    let status = NodeReport {
        stats: StatsSnapshot {
            total_connections_received: 5,
            rejected_connections: 1,
            total_net_input_bytes: 1234,
            total_net_output_bytes: 5678,
            total_error_replies: 2,
            instantaneous_ops_per_sec: 42,
            instantaneous_input_bytes_per_sec: 2048,
            instantaneous_output_bytes_per_sec: 512,
            commands: vec![
                CommandStat {
                    name: "get",
                    calls: 3,
                    usec: 10,
                    rejected_calls: 0,
                    failed_calls: 0,
                },
                CommandStat {
                    name: "client|list",
                    calls: 1,
                    usec: 7,
                    rejected_calls: 2,
                    failed_calls: 1,
                },
            ],
            errors: BTreeMap::from([("ERR".to_string(), 2), ("WRONGTYPE".to_string(), 1)]),
            ..StatsSnapshot::default()
        },
        ..NodeReport::default()
    };
    let text = render(&status, &args("stats commandstats errorstats"));
    assert_eq!(
        section(&text, "Stats"),
        "# Stats\r\n\
         total_connections_received:5\r\n\
         total_commands_processed:4\r\n\
         instantaneous_ops_per_sec:42\r\n\
         total_net_input_bytes:1234\r\n\
         total_net_output_bytes:5678\r\n\
         instantaneous_input_kbps:2.00\r\n\
         instantaneous_output_kbps:0.50\r\n\
         rejected_connections:1\r\n\
         evicted_keys:0\r\n\
         pubsub_channels:0\r\n\
         pubsub_patterns:0\r\n\
         total_error_replies:2\r\n"
    );
    assert_eq!(
        section(&text, "Commandstats"),
        "# Commandstats\r\n\
         cmdstat_get:calls=3,usec=10,usec_per_call=3.33,rejected_calls=0,failed_calls=0\r\n\
         cmdstat_client|list:calls=1,usec=7,usec_per_call=7.00,rejected_calls=2,failed_calls=1\r\n"
    );
    assert_eq!(
        section(&text, "Errorstats"),
        "# Errorstats\r\nerrorstat_ERR:count=2\r\nerrorstat_WRONGTYPE:count=1\r\n"
    );
}

#[test]
fn cpu_section_has_seconds_with_six_decimals() {
    let status = NodeReport {
        cpu: Some(CpuTimes {
            sys_us: 1_500_000,
            user_us: 12_000_042,
            children_sys_us: 0,
            children_user_us: 0,
        }),
        ..NodeReport::default()
    };
    assert_eq!(
        render(&status, &args("cpu")),
        "# CPU\r\n\
         used_cpu_sys:1.500000\r\n\
         used_cpu_user:12.000042\r\n\
         used_cpu_sys_children:0.000000\r\n\
         used_cpu_user_children:0.000000\r\n"
    );
}

#[test]
fn a_follower_is_a_slave_of_the_leaders_client_address() {
    assert_eq!(
        render(&follower(), &args("replication")),
        "# Replication\r\n\
         role:slave\r\n\
         master_host:10.0.0.1\r\n\
         master_port:6001\r\n\
         master_link_status:up\r\n\
         slave_read_repl_offset:101\r\n\
         slave_repl_offset:99\r\n\
         slave_read_only:0\r\n\
         connected_slaves:0\r\n\
         master_repl_offset:99\r\n"
    );
    // No leader known (a candidate): the link is down and there is no master to name.
    let candidate = NodeReport {
        role: "candidate".into(),
        leader_id: None,
        ..follower()
    };
    let text = render(&candidate, &args("replication"));
    assert!(
        text.contains("role:slave\r\nmaster_link_status:down\r\n"),
        "{text}"
    );
}

#[test]
fn the_leader_is_a_master_listing_the_members_it_hears_from() {
    let leader = NodeReport {
        node_id: 1,
        role: "leader".into(),
        leader_id: Some(1),
        last_log_index: 120,
        followers: vec![
            FollowerInfo {
                id: 2,
                client_addr: "10.0.0.2:6002".into(),
                match_index: 120,
                replicating: true,
                recently_active: true,
            },
            FollowerInfo {
                id: 3,
                client_addr: "10.0.0.3:6003".into(),
                match_index: 80,
                replicating: false,
                recently_active: true,
            },
            // Not heard from: not connected.
            FollowerInfo {
                id: 4,
                client_addr: "10.0.0.4:6004".into(),
                match_index: 10,
                replicating: true,
                recently_active: false,
            },
        ],
        ..follower()
    };
    assert_eq!(
        render(&leader, &args("replication")),
        "# Replication\r\n\
         role:master\r\n\
         connected_slaves:2\r\n\
         slave0:ip=10.0.0.2,port=6002,state=online,offset=120\r\n\
         slave1:ip=10.0.0.3,port=6003,state=send_bulk,offset=80\r\n\
         master_repl_offset:120\r\n"
    );
}

struct Status(NodeReport);

impl NodeInfo for Status {
    fn status(&self) -> NodeReport {
        self.0.clone()
    }
}

#[test]
fn config_resetstat_zeroes_the_counters() {
    let stats = Arc::new(ServerStats::default());
    let mut conn =
        ClientConnection::new(1, "127.0.0.1:1", Limits::default()).with_stats(Arc::clone(&stats));
    stats.connection_received();
    stats.input(100);
    stats.record(
        ServerStats::command_index(&args("get k")),
        &Reply::error("ERR boom"),
        Duration::from_micros(3),
    );
    assert_eq!(stats.snapshot().total_commands_processed(), 1);
    let node = Status(NodeReport::default());
    assert_eq!(
        conn.dispatch(&args("CONFIG RESETSTAT"), &node),
        Dispatch::Reply(Reply::OK)
    );
    assert_eq!(stats.snapshot(), StatsSnapshot::default());
}
