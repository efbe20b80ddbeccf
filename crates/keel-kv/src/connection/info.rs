//! INFO and RAFT.STATUS: Redis INFO text (`# Section` headers, `key:value` lines, CRLF endings).

use std::fmt::Write;

use bytes::Bytes;

use super::REDIS_COMPAT_VERSION;

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
pub struct NodeStatus {
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
    /// As leader: whether its clock is beyond the bound from a majority of the voters' clocks.
    pub clock_outlier: bool,
    /// As leader: each follower's measured clock offset, `id=ms`.
    pub follower_clock_offsets: Vec<(u64, i64)>,
    /// Keys in the state machine at `applied_index` (expired ones not yet removed included, as
    /// Redis counts them).
    pub keys: u64,
    /// How many of them have a deadline.
    pub expires: u64,
    pub connected_clients: u64,
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
}

const SECTIONS: [&str; 5] = ["server", "clients", "memory", "raft", "keyspace"];

/// Renders the requested sections (all for none, `default`, `all` or `everything`). Unknown
/// section names are ignored, as Redis does.
pub(crate) fn render(status: &NodeStatus, requested: &[Bytes]) -> String {
    let wants_all = requested.is_empty()
        || requested.iter().any(|s| {
            ["default", "all", "everything"]
                .iter()
                .any(|w| s.eq_ignore_ascii_case(w.as_bytes()))
        });
    let mut out = String::new();
    for section in SECTIONS {
        let wanted = wants_all
            || requested
                .iter()
                .any(|s| s.eq_ignore_ascii_case(section.as_bytes()));
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
            "raft" => out.push_str(&render_raft(status)),
            _ => {
                out.push_str("# Keyspace\r\n");
                if status.keys > 0 {
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

fn render_memory(out: &mut String, status: &NodeStatus) {
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
pub(crate) fn render_raft(status: &NodeStatus) -> String {
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
    line(&mut out, "clock_outlier", u8::from(status.clock_outlier));
    let offsets: Vec<String> = status
        .follower_clock_offsets
        .iter()
        .map(|(id, ms)| format!("{id}={ms}"))
        .collect();
    line(&mut out, "follower_clock_offsets_ms", offsets.join(","));
    out
}

/// `1=host:port,2=host:port`.
fn member_list(status: &NodeStatus, voters: bool) -> String {
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
fn client_addr_list(status: &NodeStatus) -> String {
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
