//! The linearizability checker against the reference histories in `tests/histories` (real
//! Jepsen histories of other systems, vendored from the Porcupine checker's test data), hand-built
//! histories with known verdicts, and randomly generated ones.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use keel_sim::linearizability::{
    check, parse_jepsen_etcd, parse_jepsen_kv, Append, AppendOp, AppendOutput, History, Model,
    Operation, Outcome, ParseError, Register, RegisterOp, RegisterOutput, SearchBudget, Value,
    Verdict,
};
use proptest::prelude::*;

/// Far more than any reference history needs, small enough to fail in seconds if the search
/// regresses into exponential behaviour.
const BUDGET: SearchBudget = SearchBudget::steps(20_000_000);

fn reference_histories() -> PathBuf {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/histories"));
    assert!(
        dir.join("verdicts.tsv").is_file(),
        "the reference histories are missing: expected {}/verdicts.tsv",
        dir.display()
    );
    dir.to_path_buf()
}

/// How one reference history came out.
struct Checked {
    file: String,
    expected: String,
    got: String,
    ops: usize,
    took: Duration,
}

fn verdict_name<M: Model>(verdict: &Verdict<M>) -> String {
    match verdict {
        Verdict::Linearizable => "linearizable".into(),
        Verdict::NotLinearizable(_) => "not-linearizable".into(),
        Verdict::BudgetExceeded { .. } => format!("budget-exceeded ({verdict})"),
    }
}

fn run<M: Model>(
    text: &str,
    parse: fn(&str) -> Result<History<M>, ParseError>,
) -> (String, usize, Duration) {
    match parse(text) {
        Ok(history) => {
            let start = Instant::now();
            let verdict = check(&history, BUDGET);
            (verdict_name(&verdict), history.len(), start.elapsed())
        }
        Err(e) => (format!("parse error: {e}"), 0, Duration::ZERO),
    }
}

#[test]
fn reference_histories_get_their_known_verdicts() {
    let dir = reference_histories();
    let table = std::fs::read_to_string(dir.join("verdicts.tsv")).expect("read verdicts.tsv");
    let suite_start = Instant::now();
    let mut outcomes = Vec::new();
    for row in table.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let (file, expected) = row
            .split_once('\t')
            .expect("verdicts.tsv rows are FILE<TAB>VERDICT");
        let text =
            std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("read {file}: {e}"));
        let (got, ops, took) = if file.starts_with("jepsen-etcd/") {
            run(&text, parse_jepsen_etcd)
        } else if file.starts_with("kv/") {
            run(&text, parse_jepsen_kv)
        } else {
            (format!("no parser for {file}"), 0, Duration::ZERO)
        };
        outcomes.push(Checked {
            file: file.into(),
            expected: expected.trim().into(),
            got,
            ops,
            took,
        });
    }
    let total = suite_start.elapsed();

    assert_eq!(
        outcomes.len(),
        108,
        "verdicts.tsv should list 108 histories"
    );
    let slowest = outcomes.iter().max_by_key(|o| o.took).expect("histories");
    let largest = outcomes.iter().max_by_key(|o| o.ops).expect("histories");
    eprintln!(
        "checked {} reference histories in {total:?} (parsing included); largest: {} with {} \
         operations in {:?}; slowest: {} with {} operations in {:?}",
        outcomes.len(),
        largest.file,
        largest.ops,
        largest.took,
        slowest.file,
        slowest.ops,
        slowest.took
    );
    let wrong: Vec<&Checked> = outcomes.iter().filter(|o| o.got != o.expected).collect();
    if !wrong.is_empty() {
        let mut summary = String::new();
        for o in &outcomes {
            let mark = if o.got == o.expected { "  " } else { "XX" };
            let _ = writeln!(
                summary,
                "{mark} {:<28} expected {:<17} got {:<17} {:>5} ops {:?}",
                o.file, o.expected, o.got, o.ops, o.took
            );
        }
        panic!(
            "{} of {} reference verdicts disagree:\n{summary}",
            wrong.len(),
            outcomes.len()
        );
    }
}

// ---- hand-built register histories ----

const K: &str = "k";

fn ok(
    client: u64,
    invoke: u64,
    ret: u64,
    input: RegisterOp,
    output: RegisterOutput,
) -> Operation<Register> {
    Operation::returned(client, K, input, invoke, ret, output)
}

fn write(client: u64, invoke: u64, ret: u64, v: u64) -> Operation<Register> {
    ok(
        client,
        invoke,
        ret,
        RegisterOp::Write(Some(v)),
        RegisterOutput::Written,
    )
}

fn read(client: u64, invoke: u64, ret: u64, v: Value) -> Operation<Register> {
    ok(
        client,
        invoke,
        ret,
        RegisterOp::Read,
        RegisterOutput::Read(v),
    )
}

fn cas(
    client: u64,
    invoke: u64,
    ret: u64,
    from: Value,
    to: Value,
    swapped: bool,
) -> Operation<Register> {
    let output = if swapped {
        RegisterOutput::CasOk
    } else {
        RegisterOutput::CasFailed
    };
    ok(
        client,
        invoke,
        ret,
        RegisterOp::Cas {
            expected: from,
            new: to,
        },
        output,
    )
}

fn timed_out_write(client: u64, invoke: u64, v: u64) -> Operation<Register> {
    Operation::unknown(client, K, RegisterOp::Write(Some(v)), invoke)
}

fn timed_out_cas(client: u64, invoke: u64, from: u64, to: u64) -> Operation<Register> {
    let input = RegisterOp::Cas {
        expected: Some(from),
        new: Some(to),
    };
    Operation::unknown(client, K, input, invoke)
}

fn verdict(ops: Vec<Operation<Register>>) -> Verdict<Register> {
    let mut history = History::new();
    for op in ops {
        history.push(op).expect("valid interval");
    }
    check(&history, BUDGET)
}

fn assert_linearizable(name: &str, ops: Vec<Operation<Register>>) {
    let v = verdict(ops);
    assert!(
        v.is_linearizable(),
        "{name}: expected linearizable, got {v}"
    );
}

fn assert_not_linearizable(name: &str, ops: Vec<Operation<Register>>) -> String {
    let v = verdict(ops);
    assert!(
        v.is_not_linearizable(),
        "{name}: expected not linearizable, got {v}"
    );
    v.to_string()
}

#[test]
fn linearizable_register_histories_pass() {
    assert_linearizable("empty", vec![]);
    assert_linearizable("initial read", vec![read(1, 0, 1, None)]);
    assert_linearizable(
        "sequential",
        vec![
            write(1, 0, 1, 1),
            read(2, 2, 3, Some(1)),
            cas(1, 4, 5, Some(1), Some(2), true),
            read(2, 6, 7, Some(2)),
            cas(3, 8, 9, Some(1), Some(3), false),
            read(3, 10, 11, Some(2)),
            ok(1, 12, 13, RegisterOp::Write(None), RegisterOutput::Written),
            read(2, 14, 15, None),
        ],
    );
    for last in [1, 2] {
        assert_linearizable(
            "overlapping writes in either order",
            vec![
                write(1, 0, 10, 1),
                write(2, 1, 9, 2),
                read(3, 11, 12, Some(last)),
            ],
        );
    }
    assert_linearizable(
        "reads concurrent with a write see old then new",
        vec![
            write(1, 0, 1, 1),
            write(1, 2, 10, 2),
            read(2, 3, 4, Some(1)),
            read(2, 5, 6, Some(2)),
            read(3, 7, 8, Some(2)),
        ],
    );
    assert_linearizable(
        "read overlapping the write that it sees, which returns later",
        vec![
            read(2, 0, 5, Some(7)),
            write(1, 1, 9, 7),
            read(3, 6, 7, Some(7)),
        ],
    );
    assert_linearizable(
        "racing CAS: one wins, one fails",
        vec![
            cas(1, 0, 5, None, Some(1), true),
            cas(2, 1, 4, None, Some(2), false),
            read(3, 6, 7, Some(1)),
        ],
    );
    assert_linearizable(
        "failed CAS linearized before the write that would have matched",
        vec![
            write(1, 0, 10, 5),
            cas(2, 1, 2, Some(5), Some(6), false),
            read(3, 11, 12, Some(5)),
        ],
    );
}

#[test]
fn non_linearizable_register_histories_fail() {
    let text = assert_not_linearizable(
        "stale read after a completed write",
        vec![write(1, 0, 1, 1), write(1, 2, 3, 2), read(2, 4, 5, Some(1))],
    );
    assert!(
        text.contains("client 2 read"),
        "the explanation names the stale read:\n{text}"
    );
    assert_not_linearizable(
        "read of a value never written",
        vec![write(1, 0, 1, 1), read(2, 2, 3, Some(7))],
    );
    assert_not_linearizable(
        "new value seen, then old value seen by a later read",
        vec![
            write(1, 0, 1, 1),
            write(1, 2, 20, 2),
            read(2, 3, 4, Some(2)),
            read(3, 5, 6, Some(1)),
        ],
    );
    assert_not_linearizable(
        "failed CAS that must have succeeded",
        vec![write(1, 0, 1, 1), cas(2, 2, 3, Some(1), Some(2), false)],
    );
    assert_not_linearizable(
        "CAS that swapped from a value the register never had",
        vec![write(1, 0, 1, 1), cas(2, 2, 3, Some(2), Some(3), true)],
    );
    assert_not_linearizable(
        "lost write: both acknowledged writes vanish",
        vec![write(1, 0, 3, 1), write(2, 1, 4, 2), read(3, 5, 6, None)],
    );
    assert_not_linearizable(
        "lost write: an acknowledged write is overwritten by nothing",
        vec![
            write(1, 0, 1, 1),
            write(2, 2, 3, 2),
            read(3, 4, 5, Some(2)),
            read(3, 6, 7, Some(1)),
        ],
    );
    assert_not_linearizable(
        "both racing CAS from nil swapped",
        vec![
            cas(1, 0, 5, None, Some(1), true),
            cas(2, 1, 4, None, Some(2), true),
        ],
    );
}

#[test]
#[expect(clippy::too_many_lines)]
fn timed_out_operations_may_take_effect_late_or_never() {
    // 30 timed-out writes of distinct values, then sequential reads that some of them explain
    // in an order unrelated to their invocation order.
    let mut ops: Vec<_> = (0..30).map(|c| timed_out_write(c, c, c + 100)).collect();
    let mut t = 100;
    for v in [105, 117, 103, 129, 100, 111] {
        ops.push(read(99, t, t + 1, Some(v)));
        t += 2;
    }
    assert_linearizable("30 timed-out writes explain the reads", ops.clone());

    // The same value cannot come back unless some write of it is still unused.
    ops.push(read(99, t, t + 1, Some(105)));
    assert_not_linearizable("a timed-out write takes effect at most once", ops);

    // A timed-out write may take effect long after every other operation began.
    assert_linearizable(
        "timed-out write takes effect after later operations",
        vec![
            timed_out_write(1, 0, 1),
            read(2, 10, 11, None),
            write(3, 12, 13, 2),
            read(2, 14, 15, Some(2)),
            read(2, 16, 17, Some(1)),
        ],
    );
    assert_linearizable(
        "timed-out write never takes effect",
        vec![
            timed_out_write(1, 0, 1),
            read(2, 10, 11, None),
            read(2, 12, 13, None),
        ],
    );
    assert_not_linearizable(
        "timed-out write read before it was invoked",
        vec![read(2, 0, 1, Some(1)), timed_out_write(1, 2, 1)],
    );
    assert_not_linearizable(
        "timed-out write cannot take effect twice",
        vec![
            timed_out_write(1, 0, 1),
            read(2, 10, 11, Some(1)),
            write(3, 12, 13, 2),
            read(2, 14, 15, Some(2)),
            read(2, 16, 17, Some(1)),
        ],
    );
    assert_linearizable(
        "identical timed-out writes can each take effect once",
        vec![
            timed_out_write(1, 0, 1),
            timed_out_write(4, 1, 1),
            read(2, 10, 11, Some(1)),
            write(3, 12, 13, 2),
            read(2, 14, 15, Some(2)),
            read(2, 16, 17, Some(1)),
        ],
    );
    assert_linearizable(
        "chain of timed-out CAS",
        vec![
            timed_out_cas(1, 0, 1, 2),
            timed_out_cas(4, 1, 2, 3),
            write(3, 2, 3, 1),
            read(2, 4, 5, Some(3)),
        ],
    );
    assert_not_linearizable(
        "timed-out CAS only swaps from its expected value",
        vec![
            timed_out_cas(1, 0, 1, 2),
            write(3, 2, 3, 5),
            read(2, 4, 5, Some(2)),
        ],
    );
    assert_linearizable(
        "failed CAS explained by a timed-out write moving the value away",
        vec![
            write(1, 0, 1, 1),
            timed_out_write(2, 2, 2),
            cas(3, 3, 4, Some(1), Some(3), false),
            read(3, 5, 6, Some(2)),
        ],
    );
    assert_not_linearizable(
        "failed CAS that no timed-out write can explain",
        vec![
            write(1, 0, 1, 1),
            timed_out_write(2, 5, 2),
            cas(3, 3, 4, Some(1), Some(3), false),
            read(3, 6, 7, Some(2)),
        ],
    );
    assert_linearizable(
        "timed-out CAS chains in either order of invocation",
        vec![
            timed_out_cas(1, 0, 7, 8),
            timed_out_cas(2, 1, 6, 7),
            timed_out_write(3, 2, 6),
            read(4, 3, 4, Some(8)),
            timed_out_cas(5, 5, 8, 6),
            read(4, 6, 7, Some(6)),
        ],
    );
    assert_not_linearizable(
        "a timed-out CAS cannot be used twice",
        vec![
            timed_out_cas(1, 0, 7, 8),
            timed_out_write(3, 2, 7),
            read(4, 3, 4, Some(8)),
            timed_out_write(5, 5, 7),
            read(4, 6, 7, Some(7)),
            read(4, 8, 9, Some(8)),
        ],
    );
    // History::invoke without a completion: still pending when checked, i.e. unknown.
    let mut history = History::<Register>::new();
    history.invoke(1, K, RegisterOp::Write(Some(4)), 0).unwrap();
    history.invoke(2, K, RegisterOp::Read, 1).unwrap();
    history
        .complete(2, RegisterOutput::Read(Some(4)), 2)
        .unwrap();
    history.invoke(3, K, RegisterOp::Read, 3).unwrap();
    history.time_out(3).unwrap();
    assert!(check(&history, BUDGET).is_linearizable());
}

#[test]
fn keys_are_checked_independently() {
    let mut history = History::<Register>::new();
    // Each key alone is linearizable; mixing them up as one register would not be.
    for (key, v) in [("a", 1), ("b", 2), ("c", 3)] {
        history
            .push(Operation::returned(
                1,
                key,
                RegisterOp::Write(Some(v)),
                0,
                1,
                RegisterOutput::Written,
            ))
            .unwrap();
        history
            .push(Operation::returned(
                2,
                key,
                RegisterOp::Read,
                2,
                3,
                RegisterOutput::Read(Some(v)),
            ))
            .unwrap();
        history
            .push(Operation::returned(
                3,
                key,
                RegisterOp::Read,
                4,
                5,
                RegisterOutput::Read(Some(v)),
            ))
            .unwrap();
    }
    history
        .push(Operation::returned(
            4,
            "d",
            RegisterOp::Read,
            0,
            5,
            RegisterOutput::Read(None),
        ))
        .unwrap();
    assert!(check(&history, BUDGET).is_linearizable());

    history
        .push(Operation::returned(
            4,
            "b",
            RegisterOp::Read,
            6,
            7,
            RegisterOutput::Read(Some(1)),
        ))
        .unwrap();
    let Verdict::NotLinearizable(cx) = check(&history, BUDGET) else {
        panic!("the cross-key read of b must be rejected");
    };
    assert_eq!(cx.key, "b");
    assert!(cx.operations().iter().all(|op| op.key == "b"));
}

#[test]
fn append_histories() {
    let op =
        |c, inv, ret, input, output| Operation::<Append>::returned(c, "x", input, inv, ret, output);
    let get = |s: &str| AppendOutput::Get(s.into());
    let good: History<Append> = [
        op(1, 0, 3, AppendOp::Append("a".into()), AppendOutput::Ok),
        op(2, 1, 4, AppendOp::Append("b".into()), AppendOutput::Ok),
        op(3, 2, 5, AppendOp::Get, get("b")),
        op(3, 6, 7, AppendOp::Get, get("ba")),
        op(1, 8, 9, AppendOp::Put("z".into()), AppendOutput::Ok),
        op(1, 10, 11, AppendOp::Get, get("z")),
    ]
    .into_iter()
    .collect();
    assert!(check(&good, BUDGET).is_linearizable());
    let bad: History<Append> = [
        op(1, 0, 3, AppendOp::Append("a".into()), AppendOutput::Ok),
        op(2, 1, 4, AppendOp::Append("b".into()), AppendOutput::Ok),
        op(3, 5, 6, AppendOp::Get, get("ab")),
        op(3, 7, 8, AppendOp::Get, get("ba")),
    ]
    .into_iter()
    .collect();
    assert!(check(&bad, BUDGET).is_not_linearizable());
}

// ---- random histories ----

/// One operation of a generated sequential execution, before its interval is stretched.
#[derive(Clone, Debug)]
enum Gen {
    Read,
    Write(u64),
    Cas(Option<u64>, u64),
}

fn gen_op() -> impl Strategy<Value = Gen> {
    prop_oneof![
        3 => Just(Gen::Read),
        2 => (0..4u64).prop_map(Gen::Write),
        2 => (proptest::option::of(0..4u64), 0..4u64).prop_map(|(e, n)| Gen::Cas(e, n)),
    ]
}

/// (key, operation, slack before its effect point, slack after it, timed out)
type Step = (u8, Gen, u64, u64, bool);

fn gen_steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (
            0..3u8,
            gen_op(),
            0..40u64,
            0..40u64,
            proptest::bool::weighted(0.1),
        ),
        1..60,
    )
}

/// Runs the steps sequentially against the register model: step `i` takes effect at time
/// `1000 + 10 * i`, and its interval is stretched by the slacks around that point (so
/// neighbouring intervals overlap), which keeps the history linearizable by construction.
/// Also returns the indices of the returned reads.
fn build(steps: &[Step]) -> (History<Register>, Vec<usize>) {
    let mut state: BTreeMap<u8, Value> = BTreeMap::new();
    let mut history = History::new();
    let mut reads = Vec::new();
    for (i, (key, gen, before, after, timed_out)) in steps.iter().enumerate() {
        let at = 1000 + 10 * i as u64;
        let current = state.entry(*key).or_insert(None);
        let (input, output) = match *gen {
            Gen::Read => (RegisterOp::Read, RegisterOutput::Read(*current)),
            Gen::Write(v) => (RegisterOp::Write(Some(v)), RegisterOutput::Written),
            Gen::Cas(e, n) => (
                RegisterOp::Cas {
                    expected: e,
                    new: Some(n),
                },
                if *current == e {
                    RegisterOutput::CasOk
                } else {
                    RegisterOutput::CasFailed
                },
            ),
        };
        // Timed-out operations take effect only on odd steps, so some never do.
        let applies = !timed_out || i % 2 == 1;
        if applies {
            *current = Register::step(current, &input, &output).expect("generated from the model");
        }
        // Each operation gets its own client: the ids only label reports.
        let client = i as u64;
        let key = format!("key{key}");
        let op = if *timed_out {
            Operation::unknown(client, key, input, at - before)
        } else {
            if matches!(input, RegisterOp::Read) {
                reads.push(history.len());
            }
            Operation::returned(client, key, input, at - before, at + after, output)
        };
        history.push(op).expect("valid interval");
    }
    (history, reads)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn stretched_sequential_histories_are_linearizable(steps in gen_steps()) {
        let (history, _) = build(&steps);
        let verdict = check(&history, BUDGET);
        prop_assert!(verdict.is_linearizable(), "{}", verdict);
    }

    #[test]
    fn reading_a_value_never_written_is_caught(steps in gen_steps(), pick in any::<proptest::sample::Index>()) {
        let (history, reads) = build(&steps);
        prop_assume!(!reads.is_empty());
        let victim = reads[pick.index(reads.len())];
        let mutated: History<Register> = history
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let mut op = op.clone();
                if i == victim {
                    op.outcome = Outcome::Returned {
                        time: op.return_time().expect("reads in `reads` returned"),
                        output: RegisterOutput::Read(Some(1_000)),
                    };
                }
                op
            })
            .collect();
        let verdict = check(&mutated, BUDGET);
        prop_assert!(verdict.is_not_linearizable(), "{}", verdict);
    }
}

// ---- differential test against brute force ----

/// Decides linearizability by trying every order, using nothing but `Model::step` and
/// `Model::step_unobserved`, so it shares none of the checker's shortcuts.
fn brute_force<M: Model>(ops: &[Operation<M>]) -> bool {
    fn go<M: Model>(ops: &[Operation<M>], placed: &mut [bool], state: &M::State) -> bool {
        // The earliest return among unplaced operations: nothing invoked after it may go next.
        let Some(deadline) = (0..ops.len())
            .filter(|&i| !placed[i])
            .filter_map(|i| ops[i].return_time())
            .min()
        else {
            // Only timed-out operations are left, and they may never take effect.
            return true;
        };
        for i in 0..ops.len() {
            if placed[i] || ops[i].invoke_time > deadline {
                continue;
            }
            let next = match &ops[i].outcome {
                Outcome::Returned { output, .. } => M::step(state, &ops[i].input, output),
                Outcome::Unknown => {
                    Some(M::step_unobserved(state, &ops[i].input).unwrap_or_else(|| state.clone()))
                }
            };
            if let Some(next) = next {
                placed[i] = true;
                let found = go(ops, placed, &next);
                placed[i] = false;
                if found {
                    return true;
                }
            }
        }
        false
    }
    go(ops, &mut vec![false; ops.len()], &M::init())
}

/// An interval, and whether the operation timed out.
fn gen_timing() -> impl Strategy<Value = (u64, u64, bool)> {
    (0..16u64, 0..8u64, proptest::bool::weighted(0.2))
}

fn small_value() -> impl Strategy<Value = Value> {
    proptest::option::weighted(0.8, 0..3u64)
}

fn gen_register_op() -> impl Strategy<Value = Operation<Register>> {
    let io = prop_oneof![
        small_value().prop_map(|v| (RegisterOp::Read, RegisterOutput::Read(v))),
        small_value().prop_map(|v| (RegisterOp::Write(v), RegisterOutput::Written)),
        (small_value(), small_value())
            .prop_map(|(new, old)| (RegisterOp::Swap(new), RegisterOutput::Swapped(old))),
        (small_value(), small_value(), any::<bool>()).prop_map(|(e, n, ok)| (
            RegisterOp::Cas {
                expected: e,
                new: n
            },
            if ok {
                RegisterOutput::CasOk
            } else {
                RegisterOutput::CasFailed
            }
        )),
    ];
    (io, gen_timing()).prop_map(|((input, output), (start, len, timed_out))| {
        if timed_out {
            Operation::unknown(0, K, input, start)
        } else {
            Operation::returned(0, K, input, start, start + len, output)
        }
    })
}

fn gen_append_op() -> impl Strategy<Value = Operation<Append>> {
    let piece = || proptest::sample::select(vec!["a", "b", "ab"]);
    let seen = proptest::sample::select(vec!["", "a", "b", "ab", "ba", "aab", "abb", "bab"]);
    let io = prop_oneof![
        seen.prop_map(|s| (AppendOp::Get, AppendOutput::Get(s.into()))),
        piece().prop_map(|s| (AppendOp::Put(s.into()), AppendOutput::Ok)),
        piece().prop_map(|s| (AppendOp::Append(s.into()), AppendOutput::Ok)),
    ];
    (io, gen_timing()).prop_map(|((input, output), (start, len, timed_out))| {
        if timed_out {
            Operation::unknown(0, K, input, start)
        } else {
            Operation::returned(0, K, input, start, start + len, output)
        }
    })
}

/// Gives every operation its own client so reports are unambiguous.
fn numbered<M: Model>(mut ops: Vec<Operation<M>>) -> Vec<Operation<M>> {
    for (i, op) in ops.iter_mut().enumerate() {
        op.client = i as u64;
    }
    ops
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn register_checker_agrees_with_brute_force(ops in proptest::collection::vec(gen_register_op(), 1..8)) {
        let ops = numbered(ops);
        let expected = brute_force(&ops);
        let verdict = check(&ops.iter().cloned().collect(), BUDGET);
        prop_assert_eq!(verdict.is_linearizable(), expected, "{}", verdict);
        prop_assert_eq!(verdict.is_not_linearizable(), !expected);
    }

    #[test]
    fn append_checker_agrees_with_brute_force(ops in proptest::collection::vec(gen_append_op(), 1..8)) {
        let ops = numbered(ops);
        let expected = brute_force(&ops);
        let verdict = check(&ops.iter().cloned().collect(), BUDGET);
        prop_assert_eq!(verdict.is_linearizable(), expected, "{}", verdict);
        prop_assert_eq!(verdict.is_not_linearizable(), !expected);
    }
}
