//! Keyspace notifications (`notify-keyspace-events`): the event classes a node's configuration
//! selects, their letters as Redis spells them, and the pub/sub messages an applied event
//! becomes.
//!
//! The state machine notes what each applied entry did to which key ([`KeyEvent`], noted by
//! `state_machine/notify.rs` only while a listener asks for it); the node turns each event into
//! at most two messages for its own subscribers ([`messages`]): on `__keyspace@<db>__:<key>`
//! the event's name, on `__keyevent@<db>__:<event>` the key. The configuration is the node's
//! own, as in Redis (not replicated): it decides what is delivered, never what is applied.

use bytes::Bytes;

/// `K`: events on `__keyspace@<db>__:<key>`.
pub const KEYSPACE: u16 = 1 << 0;
/// `E`: events on `__keyevent@<db>__:<event>`.
pub const KEYEVENT: u16 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME, ...).
pub const GENERIC: u16 = 1 << 2;
/// `$`: string commands.
pub const STRING: u16 = 1 << 3;
/// `l`: list commands.
pub const LIST: u16 = 1 << 4;
/// `s`: set commands.
pub const SET: u16 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u16 = 1 << 6;
/// `z`: sorted set commands.
pub const ZSET: u16 = 1 << 7;
/// `x`: a key removed because it expired.
pub const EXPIRED: u16 = 1 << 8;
/// `e`: a key evicted under `maxmemory` (keel's only policy is `noeviction`: never fired).
pub const EVICTED: u16 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u16 = 1 << 10;
/// `m`: a key missed by a read (accepted, never fired: reads are not applied entries).
pub const KEY_MISS: u16 = 1 << 11;
/// `d`: module events (keel has no modules: never fired).
pub const MODULE: u16 = 1 << 13;
/// `n`: a key created.
pub const NEW: u16 = 1 << 14;
/// `A`: every class but `m` and `n`, as in Redis.
pub const ALL: u16 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The letters of the classes in the order Redis writes them when not all of [`ALL`] is set.
const CLASS_LETTERS: [(u16, char); 10] = [
    (GENERIC, 'g'),
    (STRING, '$'),
    (LIST, 'l'),
    (SET, 's'),
    (HASH, 'h'),
    (ZSET, 'z'),
    (EXPIRED, 'x'),
    (EVICTED, 'e'),
    (STREAM, 't'),
    (MODULE, 'd'),
];

/// The flags `spec` names (`CONFIG SET notify-keyspace-events`), or `None` for a character that
/// names no class.
pub fn parse_flags(spec: &[u8]) -> Option<u16> {
    spec.iter().try_fold(0u16, |flags, &c| {
        let flag = match c {
            b'A' => ALL,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b'm' => KEY_MISS,
            b'n' => NEW,
            _ => CLASS_LETTERS
                .iter()
                .find(|&&(_, letter)| letter as u8 == c)
                .map(|&(flag, _)| flag)?,
        };
        Some(flags | flag)
    })
}

/// `flags` as `CONFIG GET` answers them: Redis's canonical spelling (`A` for all the classes it
/// covers, then `K`, `E`, `m`, `n`).
pub fn format_flags(flags: u16) -> String {
    let mut out = String::new();
    if flags & ALL == ALL {
        out.push('A');
    } else {
        for &(flag, letter) in &CLASS_LETTERS {
            if flags & flag != 0 {
                out.push(letter);
            }
        }
    }
    for (flag, letter) in [
        (KEYSPACE, 'K'),
        (KEYEVENT, 'E'),
        (KEY_MISS, 'm'),
        (NEW, 'n'),
    ] {
        if flags & flag != 0 {
            out.push(letter);
        }
    }
    out
}

/// Whether `flags` deliver anything at all: a channel kind (`K` or `E`) and a class.
pub fn delivers(flags: u16) -> bool {
    flags & (KEYSPACE | KEYEVENT) != 0 && flags & !(KEYSPACE | KEYEVENT) != 0
}

/// What an applied entry did to one key: Redis's event `event` of class `class` (one of the
/// class flags above) on `key` of database `db`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEvent {
    pub db: u32,
    pub class: u16,
    pub event: &'static str,
    pub key: Bytes,
}

/// The `(channel, message)` pairs `events` become under `flags`, in order: for each event of a
/// selected class, its keyspace message, then its keyevent message.
pub fn messages(flags: u16, events: &[KeyEvent]) -> Vec<(Bytes, Bytes)> {
    let mut out = Vec::new();
    for event in events.iter().filter(|e| e.class & flags != 0) {
        if flags & KEYSPACE != 0 {
            let mut channel = format!("__keyspace@{}__:", event.db).into_bytes();
            channel.extend_from_slice(&event.key);
            out.push((
                Bytes::from(channel),
                Bytes::from_static(event.event.as_bytes()),
            ));
        }
        if flags & KEYEVENT != 0 {
            let channel = format!("__keyevent@{}__:{}", event.db, event.event);
            out.push((Bytes::from(channel), event.key.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(spec: &str) -> String {
        format_flags(parse_flags(spec.as_bytes()).expect("valid"))
    }

    #[test]
    fn flags_read_back_as_redis_spells_them() {
        assert_eq!(canonical("gKE"), "gKE");
        assert_eq!(canonical("$lshzxeKE"), "$lshzxeKE");
        assert_eq!(canonical("KA"), "AK");
        assert_eq!(canonical("EA"), "AE");
        assert_eq!(canonical("Ex"), "xE");
        assert_eq!(canonical("nE"), "En");
        assert_eq!(canonical("AKEmn"), "AKEmn");
        assert_eq!(canonical("g$lshzxetdKE"), "AKE");
        assert_eq!(canonical(""), "");
        assert_eq!(parse_flags(b"KEq"), None);
        assert_eq!(parse_flags(b"B"), None);
    }

    #[test]
    fn only_a_channel_kind_with_a_class_delivers() {
        assert!(!delivers(0));
        assert!(!delivers(KEYSPACE | KEYEVENT));
        assert!(!delivers(ALL));
        assert!(delivers(KEYSPACE | LIST));
        assert!(delivers(KEYEVENT | NEW));
    }

    #[test]
    fn an_event_becomes_its_keyspace_and_keyevent_messages() {
        let events = [
            KeyEvent {
                db: 0,
                class: STRING,
                event: "set",
                key: Bytes::from_static(b"foo"),
            },
            KeyEvent {
                db: 3,
                class: LIST,
                event: "lpush",
                key: Bytes::from_static(b"q"),
            },
        ];
        let pairs = |flags| {
            messages(flags, &events)
                .into_iter()
                .map(|(c, m)| (String::from_utf8(c.to_vec()).unwrap(), m))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            pairs(KEYSPACE | KEYEVENT | STRING),
            [
                ("__keyspace@0__:foo".to_owned(), Bytes::from_static(b"set")),
                ("__keyevent@0__:set".to_owned(), Bytes::from_static(b"foo")),
            ]
        );
        assert_eq!(
            pairs(KEYEVENT | ALL),
            [
                ("__keyevent@0__:set".to_owned(), Bytes::from_static(b"foo")),
                ("__keyevent@3__:lpush".to_owned(), Bytes::from_static(b"q")),
            ]
        );
        assert!(pairs(KEYSPACE | HASH).is_empty());
    }
}
