//! INFO and RAFT.STATUS: Redis INFO text (`# Section` headers, `key:value` lines, CRLF endings).
//!
//! Sections, in Redis 7's order and field names: `server`, `clients`, `memory`, `stats`,
//! `replication`, `cpu`, `commandstats`, `errorstats`, keel's `raft`, `keyspace`. `INFO` alone
//! and `INFO default` give all but `commandstats` (as Redis leaves it out of its default);
//! `all` and `everything` give all. Section names are case-insensitive; unknown ones are
//! ignored. Only what keel counts is reported: a Redis field keel cannot know is left out, never
//! filled with a guess.
//!
//! `replication` maps Raft roles onto Redis's: the leader is `role:master`, with one
//! `slaveN:ip=...,port=...,state=...,offset=...` line per member it heard from within an
//! election timeout (`ip`/`port`: that member's client address; `state`: `online` while the
//! leader replicates to it, `send_bulk` while it probes for where their logs match or sends it
//! a snapshot; `offset`: the member's match index). Every other node is `role:slave`:
//! `master_host`/`master_port` are the leader's client address (left out while unknown),
//! `master_link_status` is `up` while a follower or learner knows its leader, and the offsets
//! are log indexes: `slave_read_repl_offset` the last index it holds, `slave_repl_offset` the
//! applied index. `master_repl_offset` is the leader's last log index, a follower's applied
//! index.

use std::fmt::Write;

use bytes::Bytes;

use super::stats::StatsSnapshot;
use keel_redis::REDIS_COMPAT_VERSION;

/// One member of the cluster configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    pub id: u64,
    pub peer_addr: String,
    /// Where its clients reach it, as this node knows it; empty when unknown.
    pub client_addr: String,
    /// False for learners.
    pub voter: bool,
}

/// What a node reports about itself. Filled by the runtime; all fields are this node's local
/// view, answered without a quorum round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeReport {
    pub node_id: u64,
    /// `leader`, `follower`, `candidate`, `precandidate` or `learner`.
    pub role: String,
    pub term: u64,
    /// None while no leader is known (reported as 0: node ids start at 1).
    pub leader_id: Option<u64>,
    pub commit_index: u64,
    pub applied_index: u64,
    pub snapshot_index: u64,
    pub first_log_index: u64,
    pub last_log_index: u64,
    pub members: Vec<MemberInfo>,
    /// The state machine's digest at `applied_index`.
    pub state_digest: u64,
    /// The state machine's time at `applied_index`: the highest entry stamp applied, in ms since
    /// the Unix epoch (0: no entry carried one). The same on every node at the same index.
    pub log_time_ms: u64,
    /// This node's clock minus its leader's, as the leader last measured it on heartbeats
    /// (None: no current measurement).
    pub clock_offset_ms: Option<i64>,
    /// Whether this node holds its campaigns because that offset exceeds `max-clock-offset-ms`.
    pub campaigns_held: bool,
    /// The longest time between two heartbeats of the same leader and term this node received,
    /// in ms (0: never two): how near its election timer came to starting an election.
    pub heartbeat_gap_max_ms: u64,
    /// As leader: whether its clock is beyond the bound from a majority of the voters' clocks.
    pub clock_outlier: bool,
    /// While this node recovers entries its disk lost after it had acknowledged them: the index
    /// it had promised (it starts no election until its log holds it again).
    pub recovering_to: Option<u64>,
    /// Background scrub passes completed, and findings both of a pair of passes agreed on.
    pub scrub_passes: u64,
    pub scrub_damage_found: u64,
    /// As leader: each follower's measured clock offset, `id=ms`.
    pub follower_clock_offsets: Vec<(u64, i64)>,
    /// Keys in the state machine at `applied_index` (expired ones not yet removed included, as
    /// Redis counts them).
    pub keys: u64,
    /// Each database holding keys: (index, keys, keys with a deadline); empty while database 0
    /// is the only one ever written to (`keys` and `expires` are its figures then).
    pub keyspace: Vec<(u32, usize, usize)>,
    /// How many of them have a deadline.
    pub expires: u64,
    pub connected_clients: u64,
    /// Clients waiting in a blocking pop (BLPOP, ...).
    pub blocked_clients: u64,
    /// `maxclients` (0: not reported).
    pub maxclients: u64,
    /// Bytes of all client connections' input buffers (`client-query-buffer-total-bytes`
    /// bounds them).
    pub client_query_buffers_bytes: u64,
    /// The memory the data is counted as taking (`KvStateMachine::used_bytes`): what
    /// `maxmemory` bounds.
    pub used_memory: u64,
    /// The process's resident set (0: unknown).
    pub used_memory_rss: u64,
    /// `maxmemory` (0: no limit).
    pub maxmemory: u64,
    /// The node's counters (`stats`, `commandstats`, `errorstats`).
    pub stats: StatsSnapshot,
    /// The process's CPU time (`None`: unknown).
    pub cpu: Option<CpuTimes>,
    /// On the leader: the members it replicates to (empty elsewhere).
    pub followers: Vec<FollowerInfo>,
}

/// CPU time used, in microseconds (`getrusage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub sys_us: u64,
    pub user_us: u64,
    pub children_sys_us: u64,
    pub children_user_us: u64,
}

/// A member the leader replicates to, as the leader sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FollowerInfo {
    pub id: u64,
    /// Where its clients reach it; empty when unknown.
    pub client_addr: String,
    /// The highest index known to be in its log.
    pub match_index: u64,
    /// Whether the leader knows where their logs match (false while probing or sending it a
    /// snapshot).
    pub replicating: bool,
    /// Whether it answered within the last election timeout.
    pub recently_active: bool,
}

/// The sections, in order, and whether `INFO` / `INFO default` includes them.
const SECTIONS: [(&str, bool); 10] = [
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("commandstats", false),
    ("errorstats", true),
    ("raft", true),
    ("keyspace", true),
];

/// Renders the requested sections: the default ones for none or `default`, every one for `all`
/// or `everything`. Unknown section names are ignored, as Redis does.
pub(crate) fn render(status: &NodeReport, requested: &[Bytes]) -> String {
    let asked = |word: &str| {
        requested
            .iter()
            .any(|s| s.eq_ignore_ascii_case(word.as_bytes()))
    };
    let all = asked("all") || asked("everything");
    let default = requested.is_empty() || asked("default");
    let mut out = String::new();
    for (section, in_default) in SECTIONS {
        let wanted = all || (default && in_default) || asked(section);
        if !wanted {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        match section {
            "server" => render_server(&mut out),
            "clients" => {
                out.push_str("# Clients\r\n");
                line(&mut out, "connected_clients", status.connected_clients);
                line(&mut out, "blocked_clients", status.blocked_clients);
                if status.maxclients > 0 {
                    line(&mut out, "maxclients", status.maxclients);
                    line(
                        &mut out,
                        "client_query_buffers_bytes",
                        status.client_query_buffers_bytes,
                    );
                }
            }
            "memory" => render_memory(&mut out, status),
            "stats" => render_stats(&mut out, &status.stats),
            "replication" => render_replication(&mut out, status),
            "cpu" => render_cpu(&mut out, status.cpu),
            "commandstats" => render_commandstats(&mut out, &status.stats),
            "errorstats" => {
                out.push_str("# Errorstats\r\n");
                for (code, count) in &status.stats.errors {
                    line(
                        &mut out,
                        &format!("errorstat_{code}"),
                        format_args!("count={count}"),
                    );
                }
            }
            "raft" => out.push_str(&render_raft(status)),
            _ => {
                out.push_str("# Keyspace\r\n");
                for (db, keys, expires) in &status.keyspace {
                    line(
                        &mut out,
                        &format!("db{db}"),
                        format_args!("keys={keys},expires={expires},avg_ttl=0"),
                    );
                }
                if status.keyspace.is_empty() && status.keys > 0 {
                    // The line Redis tools parse to count keys.
                    line(
                        &mut out,
                        "db0",
                        format_args!("keys={},expires={},avg_ttl=0", status.keys, status.expires),
                    );
                }
            }
        }
    }
    out
}

fn render_memory(out: &mut String, status: &NodeReport) {
    out.push_str("# Memory\r\n");
    line(out, "used_memory", status.used_memory);
    line(out, "used_memory_human", human(status.used_memory));
    line(out, "used_memory_rss", status.used_memory_rss);
    line(out, "used_memory_rss_human", human(status.used_memory_rss));
    line(out, "used_memory_dataset", status.used_memory);
    line(out, "maxmemory", status.maxmemory);
    line(out, "maxmemory_human", human(status.maxmemory));
    line(out, "maxmemory_policy", "noeviction");
}

fn render_stats(out: &mut String, stats: &StatsSnapshot) {
    out.push_str("# Stats\r\n");
    line(
        out,
        "total_connections_received",
        stats.total_connections_received,
    );
    line(
        out,
        "total_commands_processed",
        stats.total_commands_processed(),
    );
    line(
        out,
        "instantaneous_ops_per_sec",
        stats.instantaneous_ops_per_sec,
    );
    line(out, "total_net_input_bytes", stats.total_net_input_bytes);
    line(out, "total_net_output_bytes", stats.total_net_output_bytes);
    let kbps = |bytes_per_sec: u64| format!("{:.2}", bytes_per_sec as f64 / 1024.0);
    line(
        out,
        "instantaneous_input_kbps",
        kbps(stats.instantaneous_input_bytes_per_sec),
    );
    line(
        out,
        "instantaneous_output_kbps",
        kbps(stats.instantaneous_output_bytes_per_sec),
    );
    line(out, "rejected_connections", stats.rejected_connections);
    // The only policy is noeviction: no key is ever evicted.
    line(out, "evicted_keys", 0);
    line(out, "pubsub_channels", stats.pubsub_channels);
    line(out, "pubsub_patterns", stats.pubsub_patterns);
    line(out, "total_error_replies", stats.total_error_replies);
}

fn render_replication(out: &mut String, status: &NodeReport) {
    out.push_str("# Replication\r\n");
    if status.role == "leader" {
        line(out, "role", "master");
        let connected: Vec<&FollowerInfo> = status
            .followers
            .iter()
            .filter(|f| f.recently_active)
            .collect();
        line(out, "connected_slaves", connected.len());
        for (n, follower) in connected.iter().enumerate() {
            let mut fields = String::new();
            if let Some((ip, port)) = follower.client_addr.rsplit_once(':') {
                let _ = write!(fields, "ip={ip},port={port},");
            }
            let state = if follower.replicating {
                "online"
            } else {
                "send_bulk"
            };
            let _ = write!(fields, "state={state},offset={}", follower.match_index);
            line(out, &format!("slave{n}"), fields);
        }
        line(out, "master_repl_offset", status.last_log_index);
        return;
    }
    line(out, "role", "slave");
    let leader_addr = status.leader_id.and_then(|id| {
        status
            .members
            .iter()
            .find(|m| m.id == id && !m.client_addr.is_empty())
            .map(|m| m.client_addr.as_str())
    });
    if let Some((host, port)) = leader_addr.and_then(|a| a.rsplit_once(':')) {
        line(
            out,
            "master_host",
            host.trim_start_matches('[').trim_end_matches(']'),
        );
        line(out, "master_port", port);
    }
    let linked =
        status.leader_id.is_some() && matches!(status.role.as_str(), "follower" | "learner");
    line(
        out,
        "master_link_status",
        if linked { "up" } else { "down" },
    );
    line(out, "slave_read_repl_offset", status.last_log_index);
    line(out, "slave_repl_offset", status.applied_index);
    // A follower takes writes: it forwards them to the leader.
    line(out, "slave_read_only", 0);
    line(out, "connected_slaves", 0);
    line(out, "master_repl_offset", status.applied_index);
}

fn render_cpu(out: &mut String, cpu: Option<CpuTimes>) {
    out.push_str("# CPU\r\n");
    let Some(cpu) = cpu else {
        return;
    };
    let seconds = |us: u64| format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
    line(out, "used_cpu_sys", seconds(cpu.sys_us));
    line(out, "used_cpu_user", seconds(cpu.user_us));
    line(out, "used_cpu_sys_children", seconds(cpu.children_sys_us));
    line(out, "used_cpu_user_children", seconds(cpu.children_user_us));
}

fn render_commandstats(out: &mut String, stats: &StatsSnapshot) {
    out.push_str("# Commandstats\r\n");
    for c in &stats.commands {
        let per_call = if c.calls == 0 {
            0.0
        } else {
            c.usec as f64 / c.calls as f64
        };
        line(
            out,
            &format!("cmdstat_{}", c.name),
            format_args!(
                "calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}",
                c.calls, c.usec, c.rejected_calls, c.failed_calls
            ),
        );
    }
}

/// Redis's `_human` form: `1.50M`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2}{}", UNITS[unit])
}

fn render_server(out: &mut String) {
    out.push_str("# Server\r\n");
    line(out, "redis_version", REDIS_COMPAT_VERSION);
    line(out, "keel_version", env!("CARGO_PKG_VERSION"));
    line(out, "redis_mode", "standalone");
    line(out, "process_id", std::process::id());
}

/// The `# Raft` section, also the whole reply of RAFT.STATUS.
pub(crate) fn render_raft(status: &NodeReport) -> String {
    let mut out = String::from("# Raft\r\n");
    line(&mut out, "node_id", status.node_id);
    line(&mut out, "role", &status.role);
    line(&mut out, "term", status.term);
    line(&mut out, "leader_id", status.leader_id.unwrap_or(0));
    line(&mut out, "commit_index", status.commit_index);
    line(&mut out, "applied_index", status.applied_index);
    line(&mut out, "snapshot_index", status.snapshot_index);
    line(&mut out, "first_log_index", status.first_log_index);
    line(&mut out, "last_log_index", status.last_log_index);
    line(&mut out, "members", member_list(status, true));
    line(&mut out, "learners", member_list(status, false));
    line(&mut out, "client_addrs", client_addr_list(status));
    line(
        &mut out,
        "state_digest",
        format_args!("{:016x}", status.state_digest),
    );
    line(&mut out, "log_time_ms", status.log_time_ms);
    match status.clock_offset_ms {
        Some(ms) => line(&mut out, "clock_offset_ms", ms),
        None => line(&mut out, "clock_offset_ms", ""),
    }
    line(&mut out, "campaigns_held", u8::from(status.campaigns_held));
    line(
        &mut out,
        "heartbeat_gap_max_ms",
        status.heartbeat_gap_max_ms,
    );
    line(&mut out, "clock_outlier", u8::from(status.clock_outlier));
    line(
        &mut out,
        "recovering",
        u8::from(status.recovering_to.is_some()),
    );
    line(
        &mut out,
        "recovering_to_index",
        status.recovering_to.unwrap_or(0),
    );
    line(&mut out, "scrub_passes", status.scrub_passes);
    line(&mut out, "scrub_damage_found", status.scrub_damage_found);
    let offsets: Vec<String> = status
        .follower_clock_offsets
        .iter()
        .map(|(id, ms)| format!("{id}={ms}"))
        .collect();
    line(&mut out, "follower_clock_offsets_ms", offsets.join(","));
    out
}

/// `1=host:port,2=host:port`.
fn member_list(status: &NodeReport, voters: bool) -> String {
    let mut list = String::new();
    for member in status.members.iter().filter(|m| m.voter == voters) {
        if !list.is_empty() {
            list.push(',');
        }
        let _ = write!(list, "{}={}", member.id, member.peer_addr);
    }
    list
}

/// `1=host:port,2=host:port`: every member whose client address this node knows.
fn client_addr_list(status: &NodeReport) -> String {
    let mut list = String::new();
    for member in status.members.iter().filter(|m| !m.client_addr.is_empty()) {
        if !list.is_empty() {
            list.push(',');
        }
        let _ = write!(list, "{}={}", member.id, member.client_addr);
    }
    list
}

fn line(out: &mut String, key: &str, value: impl std::fmt::Display) {
    // Writing to a String cannot fail.
    let _ = write!(out, "{key}:{value}\r\n");
}

#[cfg(test)]
mod tests;
