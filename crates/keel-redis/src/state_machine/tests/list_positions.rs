//! LPOS: the cases of Redis's `type/list.tcl` (list `a b c 1 2 3 c c`), its errors in Redis's
//! words, and the reply shapes for a missing key and a key of another kind.

use super::collections::run;
use super::*;
use crate::command::Command;

fn positions(at: &[i64]) -> Reply {
    Reply::Array(at.iter().map(|&i| Reply::Integer(i)).collect())
}

fn parse_error(line: &str) -> String {
    let args: Vec<Bytes> = line.split(' ').map(b).collect();
    match Command::parse(&args) {
        Err(error) => error.to_string(),
        Ok(command) => panic!("{line} parsed as {command:?}"),
    }
}

#[test]
fn lpos_finds_matches_by_rank_count_and_maxlen() {
    let mut log = Log::new();
    assert_eq!(run(&mut log, "RPUSH l a b c 1 2 3 c c"), Reply::Integer(8));
    assert_eq!(run(&mut log, "LPOS l a"), Reply::Integer(0));
    assert_eq!(run(&mut log, "LPOS l c"), Reply::Integer(2));
    assert_eq!(run(&mut log, "LPOS l c RANK 1"), Reply::Integer(2));
    assert_eq!(run(&mut log, "LPOS l c RANK 2"), Reply::Integer(6));
    assert_eq!(run(&mut log, "LPOS l c RANK 4"), Reply::Null);
    assert_eq!(run(&mut log, "LPOS l c RANK -1"), Reply::Integer(7));
    assert_eq!(run(&mut log, "LPOS l c rank -2"), Reply::Integer(6));
    assert_eq!(run(&mut log, "LPOS l c COUNT 0"), positions(&[2, 6, 7]));
    assert_eq!(run(&mut log, "LPOS l c COUNT 1"), positions(&[2]));
    assert_eq!(run(&mut log, "LPOS l c COUNT 2"), positions(&[2, 6]));
    assert_eq!(run(&mut log, "LPOS l c COUNT 100"), positions(&[2, 6, 7]));
    assert_eq!(run(&mut log, "LPOS l c COUNT 0 RANK 2"), positions(&[6, 7]));
    assert_eq!(
        run(&mut log, "LPOS l c COUNT 2 RANK -1"),
        positions(&[7, 6])
    );
    assert_eq!(run(&mut log, "LPOS l x COUNT 2 RANK -1"), positions(&[]));
    assert_eq!(run(&mut log, "LPOS l x RANK -1"), Reply::Null);
    assert_eq!(run(&mut log, "LPOS l a COUNT 0 MAXLEN 1"), positions(&[0]));
    assert_eq!(run(&mut log, "LPOS l c COUNT 0 MAXLEN 1"), positions(&[]));
    assert_eq!(run(&mut log, "LPOS l c COUNT 0 MAXLEN 3"), positions(&[2]));
    assert_eq!(
        run(&mut log, "LPOS l c COUNT 0 MAXLEN 3 RANK -1"),
        positions(&[7, 6])
    );
    assert_eq!(
        run(&mut log, "LPOS l c COUNT 0 MAXLEN 7 RANK 2"),
        positions(&[6])
    );
    assert_eq!(run(&mut log, "LPOS l b COUNT 10 RANK 5"), positions(&[]));
    // A missing key: null, or the empty array with COUNT.
    assert_eq!(run(&mut log, "LPOS none c"), Reply::Null);
    assert_eq!(run(&mut log, "LPOS none c COUNT 0 RANK 2"), positions(&[]));
    assert_eq!(run(&mut log, "SET s v"), Reply::OK);
    assert_eq!(
        run(&mut log, "LPOS s v"),
        Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
}

#[test]
fn lpos_refuses_bad_options_in_redis_words() {
    assert!(parse_error("LPOS l c RANK 0").starts_with("ERR RANK can't be zero: use 1 to start"));
    assert_eq!(
        parse_error("LPOS l c RANK -9223372036854775808"),
        "ERR value is out of range, value must between -9223372036854775807 and \
         9223372036854775807"
    );
    assert_eq!(
        parse_error("LPOS l c COUNT -1"),
        "ERR COUNT can't be negative"
    );
    assert_eq!(
        parse_error("LPOS l c MAXLEN -1"),
        "ERR MAXLEN can't be negative"
    );
    assert_eq!(
        parse_error("LPOS l c COUNT x"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(parse_error("LPOS l c COUNT"), "ERR syntax error");
    assert_eq!(parse_error("LPOS l c WHAT 1"), "ERR syntax error");
    assert_eq!(
        parse_error("LPOS l"),
        "ERR wrong number of arguments for 'lpos' command"
    );
}
