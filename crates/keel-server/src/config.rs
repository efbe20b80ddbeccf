//! `keel serve` settings: the flags, and `--config FILE` (TOML with the same keys).
//!
//! ```toml
//! id = 1
//! data-dir = "/var/lib/keel/node-1"
//! client-addr = "0.0.0.0:6379"
//! peer-addr = "10.0.0.1:7379"
//! initial-cluster = "1=10.0.0.1:7379,2=10.0.0.2:7379,3=10.0.0.3:7379"
//! advertise-client-addr = "10.0.0.1:6379"   # where other hosts' clients reach this node
//! cluster-secret-file = "/etc/keel/cluster-secret"   # peers authenticate with it
//! metrics-addr = "0.0.0.0:9100"
//! log-format = "json"
//! protected-mode = "yes"      # or "no" (a TOML boolean works too)
//! maxmemory = "4gb"           # or a number of bytes; Redis's units: k, kb, m, mb, g, gb
//! maxmemory-policy = "noeviction"
//! ```
//!
//! Keys are the flag names without `--` (so errors name a setting by its flag). A flag given on
//! the command line overrides the file; an unknown key (a `snake_case` spelling too) is an error
//! that names it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use crate::launch::{self, NodeOptions, DEFAULT_CLUSTER_ID};
use crate::ClientLimits;
use keel_resp::Limits;
use keel_session::connection::DATABASES_DEFAULT;

/// How logs are written to stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Human,
    /// One JSON object per line (`timestamp`, `level`, `message`, fields, `target`).
    Json,
}

/// Redis's `yes` / `no` (`--protected-mode yes`); a config file may also give a boolean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YesNo(pub bool);

impl FromStr for YesNo {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "yes" | "true" => Ok(YesNo(true)),
            "no" | "false" => Ok(YesNo(false)),
            _ => Err(format!("'{text}': expected yes or no")),
        }
    }
}

/// A number of bytes, in Redis's units (`100mb`): none or `b` bytes, `k` 1000, `kb` 1024, `m`
/// 1000², `mb` 1024², `g` 1000³, `gb` 1024³, any case. A config file may also give a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemorySize(pub u64);

impl FromStr for MemorySize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        let split = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(trimmed.len());
        let (digits, unit) = trimmed.split_at(split);
        let unit_bytes: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" => 1000,
            "kb" => 1024,
            "m" => 1000 * 1000,
            "mb" => 1024 * 1024,
            "g" => 1000 * 1000 * 1000,
            "gb" => 1024 * 1024 * 1024,
            _ => {
                return Err(format!(
                    "'{text}': expected bytes, or a number with k, kb, m, mb, g or gb"
                ))
            }
        };
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(unit_bytes))
            .map(MemorySize)
            .ok_or_else(|| {
                format!("'{text}': expected bytes, or a number with k, kb, m, mb, g or gb")
            })
    }
}

/// A string or another TOML scalar, for settings a file may give either way.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Bool(bool),
    Int(u64),
    Text(String),
}

impl<'de> Deserialize<'de> for YesNo {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Scalar::deserialize(d)? {
            Scalar::Bool(b) => Ok(YesNo(b)),
            Scalar::Text(text) => text.parse().map_err(serde::de::Error::custom),
            Scalar::Int(n) => Err(serde::de::Error::custom(format!("{n}: expected yes or no"))),
        }
    }
}

impl<'de> Deserialize<'de> for MemorySize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Scalar::deserialize(d)? {
            Scalar::Int(n) => Ok(MemorySize(n)),
            Scalar::Text(text) => text.parse().map_err(serde::de::Error::custom),
            Scalar::Bool(b) => Err(serde::de::Error::custom(format!("{b}: expected bytes"))),
        }
    }
}

/// The only `maxmemory-policy` keel has.
pub const MAXMEMORY_POLICY: &str = "noeviction";

/// Every setting of `keel serve`, each optional: from the flags or from the file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServeSettings {
    pub id: Option<u64>,
    pub data_dir: Option<PathBuf>,
    pub client_addr: Option<String>,
    pub peer_addr: Option<String>,
    /// `1=host:port,2=host:port,...`
    pub initial_cluster: Option<String>,
    /// `1=host:port,2=host:port,...`
    pub client_peers: Option<String>,
    pub advertise_client_addr: Option<String>,
    pub advertise_peer_addr: Option<String>,
    /// A file holding the secret peers authenticate with (`--cluster-secret-file`).
    pub cluster_secret_file: Option<PathBuf>,
    pub requirepass: Option<String>,
    pub election_timeout_ms: Option<u64>,
    pub heartbeat_ms: Option<u64>,
    /// How far the log's time may lag the leader's clock before it commits a tick entry.
    pub time_tick_ms: Option<u64>,
    /// The largest clock offset from the leader's with which a node campaigns (0: only measure).
    #[serde(rename = "max-clock-offset-ms")]
    pub clock_offset_ms_max: Option<u64>,
    /// The scrub's read rate in MiB/s (0: off) and the pause between its passes.
    pub scrub_rate_mib_s: Option<u64>,
    pub scrub_interval_ms: Option<u64>,
    pub snapshot_threshold: Option<u64>,
    pub snapshot_threshold_bytes: Option<u64>,
    pub snapshot_log_ratio: Option<u64>,
    pub snapshot_trailing: Option<u64>,
    pub cluster_id: Option<u64>,
    pub catch_up_entries: Option<u64>,
    pub catch_up_timeout_ms: Option<u64>,
    pub metrics_addr: Option<String>,
    pub log_format: Option<LogFormat>,
    pub log_level: Option<String>,
    /// Async worker threads (default: one per core).
    pub worker_threads: Option<usize>,
    /// Allow `DEBUG` (default: refused, as in Redis).
    pub enable_debug_command: Option<bool>,
    /// Client bounds (`limits.rs`).
    pub maxclients: Option<usize>,
    /// Seconds a client may stay idle; 0: forever.
    pub timeout: Option<u64>,
    pub client_query_buffer_total_bytes: Option<usize>,
    pub client_output_buffer_limit_bytes: Option<usize>,
    /// Redis's protected mode (`protected.rs`); default yes.
    pub protected_mode: Option<YesNo>,
    /// Writes that may grow memory are refused past this many bytes of data; 0: no limit.
    pub maxmemory: Option<MemorySize>,
    /// How many databases clients may SELECT (1 to 1,024; 16 by default).
    pub databases: Option<u64>,
    /// Only `noeviction`.
    pub maxmemory_policy: Option<String>,
}

impl ServeSettings {
    /// Parses a config file's text.
    pub fn from_toml(text: &str) -> Result<ServeSettings, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<ServeSettings, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--config {}: cannot read it: {e}", path.display()))?;
        Self::from_toml(&text).map_err(|e| format!("--config {}: {e}", path.display()))
    }

    /// These settings (the flags), each falling back to `file`'s.
    pub fn over(self, file: ServeSettings) -> ServeSettings {
        ServeSettings {
            id: self.id.or(file.id),
            data_dir: self.data_dir.or(file.data_dir),
            client_addr: self.client_addr.or(file.client_addr),
            peer_addr: self.peer_addr.or(file.peer_addr),
            initial_cluster: self.initial_cluster.or(file.initial_cluster),
            client_peers: self.client_peers.or(file.client_peers),
            advertise_client_addr: self.advertise_client_addr.or(file.advertise_client_addr),
            advertise_peer_addr: self.advertise_peer_addr.or(file.advertise_peer_addr),
            cluster_secret_file: self.cluster_secret_file.or(file.cluster_secret_file),
            requirepass: self.requirepass.or(file.requirepass),
            election_timeout_ms: self.election_timeout_ms.or(file.election_timeout_ms),
            heartbeat_ms: self.heartbeat_ms.or(file.heartbeat_ms),
            time_tick_ms: self.time_tick_ms.or(file.time_tick_ms),
            clock_offset_ms_max: self.clock_offset_ms_max.or(file.clock_offset_ms_max),
            scrub_rate_mib_s: self.scrub_rate_mib_s.or(file.scrub_rate_mib_s),
            scrub_interval_ms: self.scrub_interval_ms.or(file.scrub_interval_ms),
            snapshot_threshold: self.snapshot_threshold.or(file.snapshot_threshold),
            snapshot_threshold_bytes: self
                .snapshot_threshold_bytes
                .or(file.snapshot_threshold_bytes),
            snapshot_log_ratio: self.snapshot_log_ratio.or(file.snapshot_log_ratio),
            snapshot_trailing: self.snapshot_trailing.or(file.snapshot_trailing),
            cluster_id: self.cluster_id.or(file.cluster_id),
            catch_up_entries: self.catch_up_entries.or(file.catch_up_entries),
            catch_up_timeout_ms: self.catch_up_timeout_ms.or(file.catch_up_timeout_ms),
            metrics_addr: self.metrics_addr.or(file.metrics_addr),
            log_format: self.log_format.or(file.log_format),
            log_level: self.log_level.or(file.log_level),
            worker_threads: self.worker_threads.or(file.worker_threads),
            enable_debug_command: self.enable_debug_command.or(file.enable_debug_command),
            maxclients: self.maxclients.or(file.maxclients),
            timeout: self.timeout.or(file.timeout),
            client_query_buffer_total_bytes: self
                .client_query_buffer_total_bytes
                .or(file.client_query_buffer_total_bytes),
            client_output_buffer_limit_bytes: self
                .client_output_buffer_limit_bytes
                .or(file.client_output_buffer_limit_bytes),
            protected_mode: self.protected_mode.or(file.protected_mode),
            maxmemory: self.maxmemory.or(file.maxmemory),
            databases: self.databases.or(file.databases),
            maxmemory_policy: self.maxmemory_policy.or(file.maxmemory_policy),
        }
    }

    /// The node's options, with defaults for what is not set; a missing required setting is
    /// named.
    #[expect(clippy::too_many_lines)]
    pub fn node_options(&self) -> Result<NodeOptions, String> {
        let id = self
            .id
            .ok_or("--id is required (`id = N` in a config file)")?;
        if id == 0 {
            return Err("--id must be a positive integer".into());
        }
        let initial_cluster = match &self.initial_cluster {
            Some(text) => {
                launch::parse_id_map(text).map_err(|e| format!("--initial-cluster: {e}"))?
            }
            None => BTreeMap::new(),
        };
        let client_peers = match &self.client_peers {
            Some(text) => launch::parse_id_map(text).map_err(|e| format!("--client-peers: {e}"))?,
            None => BTreeMap::new(),
        };
        let defaults = ClientLimits::default();
        let client_limits = ClientLimits {
            maxclients: self.maxclients.unwrap_or(defaults.maxclients),
            idle_timeout: self
                .timeout
                .filter(|&seconds| seconds > 0)
                .map(Duration::from_secs),
            query_buffer_total_bytes: self
                .client_query_buffer_total_bytes
                .unwrap_or(defaults.query_buffer_total_bytes),
            output_buffer_bytes: self
                .client_output_buffer_limit_bytes
                .unwrap_or(defaults.output_buffer_bytes),
        };
        client_limits.validate(&Limits::default())?;
        if let Some(policy) = &self.maxmemory_policy {
            if !policy.eq_ignore_ascii_case(MAXMEMORY_POLICY) {
                return Err(format!(
                    "--maxmemory-policy {policy}: keel has only {MAXMEMORY_POLICY} (past \
                     --maxmemory, writes that may grow memory are refused); evicting keys would \
                     drop writes the cluster acknowledged"
                ));
            }
        }
        let databases = self.databases.unwrap_or(DATABASES_DEFAULT);
        if !(1..=u64::from(keel_redis::state_machine::DATABASES_MAX)).contains(&databases) {
            return Err(format!(
                "--databases {databases}: must be from 1 to {}",
                keel_redis::state_machine::DATABASES_MAX
            ));
        }
        let peer_addr = match &self.peer_addr {
            Some(addr) => addr.clone(),
            None => initial_cluster
                .get(&id)
                .cloned()
                .ok_or("--peer-addr is required (or this node's entry in --initial-cluster)")?,
        };
        Ok(NodeOptions {
            id,
            cluster_id: self.cluster_id.unwrap_or(DEFAULT_CLUSTER_ID),
            data_dir: self
                .data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("./keel-data/node-{id}"))),
            client_addr: self
                .client_addr
                .clone()
                .unwrap_or_else(|| "127.0.0.1:6379".into()),
            peer_addr,
            initial_cluster,
            client_peers,
            advertise_client_addr: self.advertise_client_addr.clone(),
            advertise_peer_addr: self.advertise_peer_addr.clone(),
            cluster_secret_file: self.cluster_secret_file.clone(),
            requirepass: self.requirepass.clone(),
            election_timeout_ms: self.election_timeout_ms,
            heartbeat_ms: self.heartbeat_ms,
            time_tick_ms: self.time_tick_ms,
            clock_offset_ms_max: self.clock_offset_ms_max,
            scrub_rate_mib_s: self.scrub_rate_mib_s,
            scrub_interval_ms: self.scrub_interval_ms,
            snapshot_threshold: self.snapshot_threshold,
            snapshot_threshold_bytes: self.snapshot_threshold_bytes,
            snapshot_log_ratio: self.snapshot_log_ratio,
            snapshot_trailing: self.snapshot_trailing,
            catch_up_entries: self.catch_up_entries,
            catch_up_timeout_ms: self.catch_up_timeout_ms,
            enable_debug_command: self.enable_debug_command.unwrap_or(false),
            client_limits,
            protected_mode: self.protected_mode.is_none_or(|YesNo(on)| on),
            maxmemory: self.maxmemory.map_or(0, |MemorySize(n)| n),
            databases,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
        id = 2
        data-dir = "/tmp/keel/node-2"
        client-addr = "127.0.0.1:6380"
        peer-addr = "127.0.0.1:7380"
        initial-cluster = "1=127.0.0.1:7379,2=127.0.0.1:7380"
        client-peers = "1=127.0.0.1:6379,2=127.0.0.1:6380"
        election-timeout-ms = 300
        heartbeat-ms = 50
        snapshot-threshold = 1000
        snapshot-log-ratio = 2
        snapshot-trailing = 100
        cluster-id = 7
        cluster-secret-file = "/etc/keel/secret"
        metrics-addr = "127.0.0.1:9100"
        log-format = "json"
        log-level = "debug"
        worker-threads = 1
        enable-debug-command = true
        maxclients = 500
        timeout = 300
        client-query-buffer-total-bytes = 536870912
        client-output-buffer-limit-bytes = 8388608
        protected-mode = "no"
        maxmemory = "100mb"
        maxmemory-policy = "noeviction"
        max-clock-offset-ms = 250
    "#;

    #[test]
    fn every_key_parses() {
        let s = ServeSettings::from_toml(FULL).unwrap();
        assert_eq!(s.id, Some(2));
        assert_eq!(s.data_dir, Some(PathBuf::from("/tmp/keel/node-2")));
        assert_eq!(s.election_timeout_ms, Some(300));
        assert_eq!(s.cluster_id, Some(7));
        assert_eq!(s.metrics_addr.as_deref(), Some("127.0.0.1:9100"));
        assert_eq!(s.log_format, Some(LogFormat::Json));
        assert_eq!(s.log_level.as_deref(), Some("debug"));
        assert_eq!(s.worker_threads, Some(1));
        // The key keeps its name whatever the field is called (operators' files do not change).
        assert_eq!(s.clock_offset_ms_max, Some(250));
        let options = s.node_options().unwrap();
        assert_eq!(options.id, 2);
        assert_eq!(options.cluster_id, 7);
        assert_eq!(options.peer_addr, "127.0.0.1:7380");
        assert_eq!(options.initial_cluster.len(), 2);
        assert_eq!(options.client_peers[&1], "127.0.0.1:6379");
        assert_eq!(options.snapshot_trailing, Some(100));
        assert_eq!(options.snapshot_log_ratio, Some(2));
        assert_eq!(
            options.cluster_secret_file,
            Some(PathBuf::from("/etc/keel/secret"))
        );
        assert!(options.enable_debug_command);
        assert!(!options.protected_mode);
        assert_eq!(options.maxmemory, 100 * 1024 * 1024);
        assert_eq!(
            options.client_limits,
            ClientLimits {
                maxclients: 500,
                idle_timeout: Some(Duration::from_secs(300)),
                query_buffer_total_bytes: 512 * 1024 * 1024,
                output_buffer_bytes: 8 * 1024 * 1024,
            }
        );
    }

    #[test]
    fn client_limits_default_and_contradictions_are_refused() {
        let base = "id = 1\npeer-addr = \"a:1\"\n";
        let options = ServeSettings::from_toml(base)
            .unwrap()
            .node_options()
            .unwrap();
        assert_eq!(options.client_limits, ClientLimits::default());
        let never = ServeSettings::from_toml(&format!("{base}timeout = 0"))
            .unwrap()
            .node_options()
            .unwrap();
        assert_eq!(never.client_limits.idle_timeout, None);
        // A total smaller than one request's buffer: refused, naming both.
        let e =
            ServeSettings::from_toml(&format!("{base}client-query-buffer-total-bytes = 1000000"))
                .unwrap()
                .node_options()
                .unwrap_err();
        assert!(
            e.contains("--client-query-buffer-total-bytes 1000000") && e.contains("request limit"),
            "{e}"
        );
    }

    #[test]
    fn protected_mode_and_maxmemory_take_redis_spellings() {
        let base = "id = 1\npeer-addr = \"a:1\"\n";
        let options = |extra: &str| {
            ServeSettings::from_toml(&format!("{base}{extra}")).and_then(|s| s.node_options())
        };
        let defaults = options("").unwrap();
        assert!(defaults.protected_mode);
        assert_eq!(defaults.maxmemory, 0);
        assert!(!options("protected-mode = false").unwrap().protected_mode);
        assert!(options("protected-mode = \"yes\"").unwrap().protected_mode);
        let e = options("protected-mode = \"maybe\"").unwrap_err();
        assert!(e.contains("expected yes or no"), "{e}");
        assert_eq!(options("maxmemory = 1048576").unwrap().maxmemory, 1 << 20);
        for (text, bytes) in [
            ("2k", 2_000),
            ("2KB", 2_048),
            ("3m", 3_000_000),
            ("3mb", 3 << 20),
            ("1g", 1_000_000_000),
            ("1Gb", 1 << 30),
            ("77", 77),
            ("77b", 77),
        ] {
            assert_eq!(text.parse::<MemorySize>(), Ok(MemorySize(bytes)), "{text}");
        }
        for bad in ["", "mb", "1tb", "-1", "1.5mb", "99999999999999999999gb"] {
            assert!(bad.parse::<MemorySize>().is_err(), "{bad}");
        }
        let e = options("maxmemory-policy = \"allkeys-lru\"").unwrap_err();
        assert!(
            e.contains("--maxmemory-policy allkeys-lru") && e.contains("noeviction"),
            "{e}"
        );
        assert!(options("maxmemory-policy = \"NoEviction\"").is_ok());
    }

    #[test]
    fn keys_are_spelled_like_the_flags() {
        let e = ServeSettings::from_toml("id = 1\ndata_dir = \"d\"").unwrap_err();
        assert!(e.contains("data_dir"), "{e}");
        assert!(e.contains("data-dir"), "the valid spelling is listed: {e}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = ServeSettings::from_toml("id = 1\nelection-timeout = 300").unwrap_err();
        assert!(e.contains("election-timeout"), "{e}");
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn wrong_types_and_values_are_errors() {
        let e = ServeSettings::from_toml("id = \"one\"").unwrap_err();
        assert!(e.contains("id"), "{e}");
        let e = ServeSettings::from_toml("log-format = \"xml\"").unwrap_err();
        assert!(e.contains("xml"), "{e}");
        assert!(ServeSettings::from_toml("id = -1").is_err());
    }

    #[test]
    fn flags_override_the_file() {
        let file = ServeSettings::from_toml(FULL).unwrap();
        let flags = ServeSettings {
            client_addr: Some("127.0.0.1:7000".into()),
            heartbeat_ms: Some(20),
            ..ServeSettings::default()
        };
        let merged = flags.over(file);
        assert_eq!(merged.client_addr.as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(merged.heartbeat_ms, Some(20));
        // Everything not given as a flag comes from the file.
        assert_eq!(merged.id, Some(2));
        assert_eq!(merged.election_timeout_ms, Some(300));
        assert_eq!(merged.log_format, Some(LogFormat::Json));
        // Without a file, the flags alone.
        let alone = ServeSettings {
            id: Some(3),
            peer_addr: Some("127.0.0.1:7001".into()),
            ..ServeSettings::default()
        };
        assert_eq!(alone.clone().over(ServeSettings::default()), alone);
    }

    #[test]
    fn missing_required_settings_are_named() {
        let e = ServeSettings::default().node_options().unwrap_err();
        assert!(e.contains("--id is required"), "{e}");
        let e = ServeSettings::from_toml("id = 4")
            .unwrap()
            .node_options()
            .unwrap_err();
        assert!(e.contains("--peer-addr is required"), "{e}");
        // The peer address may come from this node's entry in the initial cluster.
        let s = ServeSettings::from_toml("id = 1\ninitial-cluster = \"1=127.0.0.1:7001\"").unwrap();
        let options = s.node_options().unwrap();
        assert_eq!(options.peer_addr, "127.0.0.1:7001");
        assert_eq!(options.cluster_id, DEFAULT_CLUSTER_ID);
        assert_eq!(options.client_addr, "127.0.0.1:6379");
        let e = ServeSettings::from_toml("id = 0\npeer-addr = \"a:1\"")
            .unwrap()
            .node_options()
            .unwrap_err();
        assert!(e.contains("positive"), "{e}");
    }

    #[test]
    fn bad_id_maps_name_their_key() {
        let s =
            ServeSettings::from_toml("id = 1\npeer-addr = \"a:1\"\nclient-peers = \"x\"").unwrap();
        assert!(s.node_options().unwrap_err().contains("client-peers"));
    }
}
