use bytes::Bytes;

use keel_redis::command::{Command, LocalCommand};
use keel_resp::Reply;

/// The reply to a COMMAND request, through the parser as a client's would go.
fn command(line: &str) -> Reply {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|w| Bytes::from(w.to_string()))
        .collect();
    match Command::parse(&args) {
        Ok(Command::Local(LocalCommand::Command(query))) => super::command_reply(&query),
        Ok(other) => panic!("{line}: {other:?}"),
        Err(error) => error.to_reply(),
    }
}

fn bulks(words: &[&str]) -> Reply {
    Reply::Array(words.iter().map(|w| Reply::text(*w)).collect())
}

fn simples(words: &[&'static str]) -> Reply {
    Reply::Array(words.iter().map(|w| Reply::simple(*w)).collect())
}

fn names(reply: Reply) -> Vec<String> {
    let Reply::Array(items) = reply else {
        panic!("not an array: {reply:?}")
    };
    items
        .into_iter()
        .map(|item| match item {
            Reply::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
            other => panic!("not a name: {other:?}"),
        })
        .collect()
}

#[test]
fn getkeys_finds_the_keys_of_each_command() {
    assert_eq!(command("COMMAND GETKEYS get key"), bulks(&["key"]));
    assert_eq!(
        command("COMMAND GETKEYS lcs key1 key2"),
        bulks(&["key1", "key2"])
    );
    assert_eq!(
        command("COMMAND GETKEYS MSET k1 v1 k2 v2"),
        bulks(&["k1", "k2"])
    );
    assert_eq!(
        command("COMMAND GETKEYS del a b c"),
        bulks(&["a", "b", "c"])
    );
    assert_eq!(command("COMMAND GETKEYS rename a b"), bulks(&["a", "b"]));
    assert_eq!(command("COMMAND GETKEYS set k v EX 10"), bulks(&["k"]));
    assert_eq!(command("COMMAND GETKEYS watch x y"), bulks(&["x", "y"]));
    // SORT's destination is found by its keyword, the last STORE winning, as in Redis's tests
    // "SORT extracts STORE correctly" and "SORT extracts multiple STORE correctly".
    assert_eq!(
        command("COMMAND GETKEYS sort abc store def"),
        bulks(&["abc", "def"])
    );
    assert_eq!(
        command("COMMAND GETKEYS sort abc store invalid store stillbad store def"),
        bulks(&["abc", "def"])
    );
    assert_eq!(
        command("COMMAND GETKEYS sort abc limit 0 1 get store by store"),
        bulks(&["abc"])
    );
    assert_eq!(command("COMMAND GETKEYS sort_ro abc"), bulks(&["abc"]));
}

#[test]
fn getkeysandflags_gives_redis_key_flags() {
    let key =
        |name: &str, flags: &[&'static str]| Reply::Array(vec![Reply::text(name), simples(flags)]);
    assert_eq!(
        command("COMMAND GETKEYSANDFLAGS set k1 v1"),
        Reply::Array(vec![key("k1", &["OW", "update"])])
    );
    assert_eq!(
        command("COMMAND GETKEYSANDFLAGS set k1 v1 get"),
        Reply::Array(vec![key("k1", &["RW", "access", "update"])])
    );
    assert_eq!(
        command("COMMAND GETKEYSANDFLAGS mset k1 v1 k2 v2"),
        Reply::Array(vec![
            key("k1", &["OW", "update"]),
            key("k2", &["OW", "update"])
        ])
    );
    assert_eq!(
        command("COMMAND GETKEYSANDFLAGS sort a BY w_* STORE b"),
        Reply::Array(vec![
            key("a", &["RO", "access"]),
            key("b", &["OW", "update"])
        ])
    );
    assert_eq!(
        command("COMMAND GETKEYSANDFLAGS copy a b"),
        Reply::Array(vec![
            key("a", &["RO", "access"]),
            key("b", &["OW", "update"])
        ])
    );
}

#[test]
fn getkeys_refuses_in_redis_words() {
    assert_eq!(
        command("COMMAND GETKEYS nosuch a"),
        Reply::error("ERR Invalid command specified")
    );
    assert_eq!(
        command("COMMAND GETKEYS ping hello"),
        Reply::error("ERR The command has no key arguments")
    );
    assert_eq!(
        command("COMMAND GETKEYS get a b"),
        Reply::error("ERR Invalid number of arguments specified for command")
    );
    assert_eq!(
        command("COMMAND GETKEYS get"),
        Reply::error("ERR wrong number of arguments for 'command|getkeys' command")
    );
}

#[test]
fn list_filters_by_pattern_category_and_module() {
    let all = names(command("COMMAND LIST"));
    assert!(all.contains(&"set".to_string()));
    assert!(all.contains(&"client|list".to_string()));
    assert_eq!(names(command("COMMAND LIST FILTERBY PATTERN set")), ["set"]);
    let config = names(command("COMMAND LIST FILTERBY PATTERN config*"));
    assert!(config.contains(&"config".to_string()) && config.contains(&"config|get".to_string()));
    assert_eq!(
        names(command("COMMAND LIST FILTERBY PATTERN config|*re*")),
        ["config|resetstat"]
    );
    let strings = names(command("COMMAND LIST FILTERBY ACLCAT string"));
    assert!(strings.contains(&"get".to_string()) && !strings.contains(&"ping".to_string()));
    let fast = names(command("COMMAND LIST filterby aclcat FAST"));
    assert!(fast.contains(&"get".to_string()) && !fast.contains(&"keys".to_string()));
    assert!(names(command("COMMAND LIST FILTERBY ACLCAT nosuch")).is_empty());
    assert!(names(command("COMMAND LIST FILTERBY MODULE any")).is_empty());
    for bad in [
        "COMMAND LIST bad_arg",
        "COMMAND LIST FILTERBY bad_arg",
        "COMMAND LIST FILTERBY bad_arg bad_arg2",
    ] {
        assert_eq!(command(bad), Reply::error("ERR syntax error"), "{bad}");
    }
}

#[test]
fn info_has_categories_and_key_specs() {
    let Reply::Array(entries) = command("COMMAND INFO get rename get|key client|list") else {
        panic!()
    };
    let Reply::Array(get) = &entries[0] else {
        panic!()
    };
    assert_eq!(get.len(), 10);
    assert_eq!(get[6], simples(&["@read", "@string", "@fast"]));
    let field = |k: &str, v: Reply| (Reply::text(k), v);
    let spec = |flags: &[&'static str], index: i64| {
        Reply::Map(vec![
            field("flags", simples(flags)),
            field(
                "begin_search",
                Reply::Map(vec![
                    field("type", Reply::text("index")),
                    field(
                        "spec",
                        Reply::Map(vec![field("index", Reply::Integer(index))]),
                    ),
                ]),
            ),
            field(
                "find_keys",
                Reply::Map(vec![
                    field("type", Reply::text("range")),
                    field(
                        "spec",
                        Reply::Map(vec![
                            field("lastkey", Reply::Integer(0)),
                            field("keystep", Reply::Integer(1)),
                            field("limit", Reply::Integer(0)),
                        ]),
                    ),
                ]),
            ),
        ])
    };
    assert_eq!(get[8], Reply::Array(vec![spec(&["RO", "access"], 1)]));
    let Reply::Array(rename) = &entries[1] else {
        panic!()
    };
    assert_eq!(
        rename[8],
        Reply::Array(vec![
            spec(&["RW", "access", "delete"], 1),
            spec(&["OW", "update"], 2)
        ])
    );
    assert_eq!(rename[6], simples(&["@keyspace", "@write", "@slow"]));
    assert_eq!(entries[2], Reply::Null);
    let Reply::Array(list) = &entries[3] else {
        panic!()
    };
    assert_eq!(list[0], Reply::text("client|list"));
    assert_eq!(list[1], Reply::Integer(-2));
    // CLIENT's entry lists its subcommands.
    let Reply::Array(client) = command("COMMAND INFO client") else {
        panic!()
    };
    let Reply::Array(client) = &client[0] else {
        panic!()
    };
    let Reply::Array(subs) = &client[9] else {
        panic!()
    };
    assert!(subs.len() >= 8);
}

#[test]
fn docs_have_summary_since_group_and_complexity() {
    let Reply::Map(docs) = command("COMMAND DOCS GET nosuch config") else {
        panic!()
    };
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0].0, Reply::text("get"));
    let Reply::Map(get) = &docs[0].1 else {
        panic!()
    };
    let keys: Vec<&Reply> = get.iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            &Reply::text("summary"),
            &Reply::text("since"),
            &Reply::text("group"),
            &Reply::text("complexity")
        ]
    );
    assert_eq!(get[1].1, Reply::text("1.0.0"));
    assert_eq!(get[2].1, Reply::text("string"));
    assert_eq!(get[3].1, Reply::text("O(1)"));
    let Reply::Map(config) = &docs[1].1 else {
        panic!()
    };
    let (name, Reply::Map(subs)) = config.last().unwrap() else {
        panic!()
    };
    assert_eq!(name, &Reply::text("subcommands"));
    assert!(subs
        .iter()
        .any(|(k, _)| k == &Reply::text("config|resetstat")));
}

#[test]
fn every_command_has_docs_and_consistent_key_specs() {
    for spec in keel_redis::command::COMMAND_TABLE {
        let docs = keel_redis::command::metadata::command_docs(spec.name);
        assert!(!docs.complexity.is_empty(), "{}", spec.name);
        assert!(!super::summary(spec.name).is_empty(), "{}", spec.name);
        // The legacy range and the key specs agree on whether there are keys.
        let specs = keel_redis::command::metadata::key_specs(spec.name);
        assert_eq!(specs.is_empty(), spec.first_key == 0, "{}", spec.name);
    }
    for sub in keel_redis::command::metadata::SUBCOMMANDS {
        let (parent, _) = sub.full_name.split_once('|').unwrap();
        assert!(keel_redis::command::metadata::has_subcommands(parent));
        assert!(
            !super::summary(sub.full_name).is_empty(),
            "{}",
            sub.full_name
        );
    }
}
