//! Protected mode, as Redis has it: a node with no `requirepass` serves only clients that
//! connect from the loopback interface, and answers any other the explanation below, then closes
//! the connection. It guards against the most common exposure, a node reachable from other
//! hosts with no password set; `protected-mode no` turns it off.
//!
//! Loopback is 127.0.0.0/8 and ::1, an IPv4-mapped IPv6 address counting as the IPv4 address it
//! maps (a dual-stack listener sees IPv4 clients that way).
//!
//! One exemption, for multi-host clusters: a connection from the host of a cluster member is
//! served. A follower forwards its clients' requests to the leader over a client connection
//! from its own host, so without it no multi-host cluster could run in protected mode without a
//! password. It admits nothing new: anyone on a member's host can already reach the cluster
//! through that member's loopback client port, and the member forwards what they send. A member
//! host is the host of an address this node has for a member: the peer addresses it was given
//! (`--initial-cluster`, `RAFT.MEMBER ADD` run here), the client addresses members announce in
//! their authenticated peer handshakes (`--cluster-secret-file`; without a secret, anyone who
//! reaches the peer port can speak Raft to the node, which is worse than any client), those
//! recorded through the log (`RAFT.MEMBER ADD ... CLIENT`) and `--client-peers`. IP literals
//! are compared as they are; host names are resolved in the background every
//! [`RESOLVE_INTERVAL`].

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

/// Redis 7's answer (networking.c) up to the list of remedies; the remedies are keel's, since
/// keel has no `CONFIG SET` and no configuration rewrite.
pub const DENIED: &str = "DENIED Redis is running in protected mode because protected mode is \
     enabled and no password is set for the default user. In this mode connections are only \
     accepted from the loopback interface. If you want to connect from external computers to \
     Redis you may adopt one of the following solutions: 1) Restart the node with the \
     '--protected-mode no' option (protected-mode = \"no\" in the configuration file), however \
     MAKE SURE it is not publicly accessible from internet if you do so. 2) Set up an \
     authentication password for the default user (--requirepass, the same on every node of the \
     cluster). NOTE: You only need to do one of the above things in order for the server to \
     start accepting connections from the outside.";

/// How often host names among the members' addresses are resolved again.
pub const RESOLVE_INTERVAL: Duration = Duration::from_secs(5);

/// Whether protected mode refuses a client connecting from `peer`: protected mode on, no
/// password, `peer` not loopback and not a member's host (`is_member_host`, asked last: only
/// for connections the other rules would refuse).
pub fn refuses(
    protected_mode: bool,
    password_set: bool,
    peer: IpAddr,
    is_member_host: impl FnOnce(IpAddr) -> bool,
) -> bool {
    if !protected_mode || password_set {
        return false;
    }
    let peer = peer.to_canonical();
    !peer.is_loopback() && !is_member_host(peer)
}

/// The hosts of the addresses of `addrs` (`host:port`, `[v6]:port`) that are IP literals,
/// canonical (IPv4-mapped as IPv4); the names among them in `names`.
pub fn hosts<'a>(
    addrs: impl IntoIterator<Item = &'a str>,
    names: &mut Vec<String>,
) -> HashSet<IpAddr> {
    let mut ips = HashSet::new();
    for addr in addrs {
        let Some((host, _port)) = addr.rsplit_once(':') else {
            continue;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            continue;
        }
        match host.parse::<IpAddr>() {
            Ok(ip) => {
                ips.insert(ip.to_canonical());
            }
            Err(_) => names.push(host.to_string()),
        }
    }
    ips
}

/// Addresses of members' host names, as last resolved.
#[derive(Debug, Default)]
pub struct ResolvedHosts {
    ips: Mutex<HashSet<IpAddr>>,
}

impl ResolvedHosts {
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.lock().contains(&ip)
    }

    pub fn replace(&self, ips: HashSet<IpAddr>) {
        *self.lock() = ips;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<IpAddr>> {
        self.ips.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_loopback_clients_are_served_without_a_password() {
        let nobody = |_| false;
        for served in ["127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1"] {
            assert!(!refuses(true, false, ip(served), nobody), "{served}");
        }
        for refused in [
            "10.0.0.5",
            "192.0.2.2",
            "::ffff:10.0.0.5",
            "2001:db8::1",
            "0.0.0.0",
        ] {
            assert!(refuses(true, false, ip(refused), nobody), "{refused}");
        }
    }

    #[test]
    fn a_password_or_protected_mode_off_serves_everyone() {
        let nobody = |_| false;
        assert!(!refuses(true, true, ip("10.0.0.5"), nobody));
        assert!(!refuses(false, false, ip("10.0.0.5"), nobody));
        assert!(!refuses(false, true, ip("2001:db8::1"), nobody));
    }

    #[test]
    fn members_hosts_are_served_and_matched_canonically() {
        let mut names = Vec::new();
        let members = hosts(
            [
                "10.0.0.1:7379",
                "[2001:db8::2]:6379",
                "node-3.example:7379",
                "bad",
            ],
            &mut names,
        );
        assert_eq!(names, ["node-3.example"]);
        let is_member = |peer: IpAddr| members.contains(&peer);
        assert!(!refuses(true, false, ip("10.0.0.1"), is_member));
        // A dual-stack listener sees an IPv4 member as an IPv4-mapped address.
        assert!(!refuses(true, false, ip("::ffff:10.0.0.1"), is_member));
        assert!(!refuses(true, false, ip("2001:db8::2"), is_member));
        assert!(refuses(true, false, ip("10.0.0.2"), is_member));
        // The member check is not consulted when another rule already decides.
        let never = |_| panic!("consulted");
        assert!(!refuses(true, false, ip("127.0.0.1"), never));
        assert!(!refuses(true, true, ip("10.0.0.9"), never));
        assert!(!refuses(false, false, ip("10.0.0.9"), never));
    }

    #[test]
    fn the_refusal_is_redis_words_up_to_the_remedies() {
        assert!(DENIED.starts_with(
            "DENIED Redis is running in protected mode because protected mode is enabled and no \
             password is set for the default user. In this mode connections are only accepted \
             from the loopback interface. If you want to connect from external computers to \
             Redis you may adopt one of the following solutions: "
        ));
        assert!(DENIED.ends_with(
            "NOTE: You only need to do one of the above things in order for the server to start \
             accepting connections from the outside."
        ));
        assert!(!DENIED.contains('\r') && !DENIED.contains('\n'));
    }
}
