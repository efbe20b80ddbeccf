//! Unit tests of the parsers and of the search's explanations.

use super::*;

fn w(v: u64) -> RegisterOp {
    RegisterOp::Write(Some(v))
}

fn read(v: Option<u64>) -> RegisterOutput {
    RegisterOutput::Read(v)
}

#[test]
fn parses_every_etcd_line_form() {
    let text = "\
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 1\t:invoke\t:write\t3
INFO  jepsen.util - 2   :invoke :cas    [3 0]
INFO  jepsen.util - 0\t:ok\t:read\tnil
INFO  jepsen.util - 1\t:ok\t:write\t3
INFO  jepsen.util - 2\t:fail\t:cas\t[3 0]
INFO  jepsen.util - 3\t:invoke\t:read\tnil
INFO  jepsen.util - 3\t:fail\t:read\t:timed-out
INFO  jepsen.util - 4\t:invoke\t:cas\t[nil 1]
INFO  jepsen.util - 4\t:info\t:cas\t:timed-out

INFO  jepsen.util - 5\t:invoke\t:write\t2
INFO  jepsen.util - 6\t:invoke\t:read\tnil
INFO  jepsen.util - 6\t:ok\t:read\t2
";
    let h = parse_jepsen_etcd(text).expect("parses");
    let ops: Vec<_> = h.iter().cloned().collect();
    let key = ETCD_KEY;
    assert_eq!(
        ops,
        vec![
            Operation::returned(0, key, RegisterOp::Read, 1, 4, read(None)),
            Operation::returned(1, key, w(3), 2, 5, RegisterOutput::Written),
            Operation::returned(
                2,
                key,
                RegisterOp::Cas {
                    expected: Some(3),
                    new: Some(0)
                },
                3,
                6,
                RegisterOutput::CasFailed
            ),
            Operation::unknown(
                4,
                key,
                RegisterOp::Cas {
                    expected: None,
                    new: Some(1)
                },
                9
            ),
            Operation::returned(6, key, RegisterOp::Read, 13, 14, read(Some(2))),
            Operation::unknown(5, key, w(2), 12),
        ]
    );
    assert!(check(&h, SearchBudget::default()).is_linearizable());
}

#[test]
fn etcd_errors_carry_line_numbers() {
    let cases = [
        ("INFO  jepsen.util - 0\t:ok\t:read\t1\n", 1, ParseErrorKind::NothingPending { process: 0 }),
        (
            "INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 0\t:invoke\t:read\tnil\n",
            2,
            ParseErrorKind::AlreadyPending { process: 0 },
        ),
        (
            "INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 0\t:ok\t:write\t1\n",
            2,
            ParseErrorKind::Mismatch { invoked: "read".into(), completed: "write".into() },
        ),
        ("INFO  jepsen.util - 0\t:begin\t:read\tnil\n", 1, ParseErrorKind::UnknownType("begin".into())),
        ("INFO  jepsen.util - 0\t:invoke\t:frob\tnil\n", 1, ParseErrorKind::UnknownFunction("frob".into())),
    ];
    for (text, line, kind) in cases {
        assert_eq!(
            parse_jepsen_etcd(text).err(),
            Some(ParseError { line, kind }),
            "{text}"
        );
    }
    for bad in [
        "garbage",
        "INFO  jepsen.util - x\t:invoke\t:read\tnil",
        "INFO  jepsen.util - 0\tinvoke\t:read\tnil",
        "INFO  jepsen.util - 0\t:invoke\t:write\tseven",
        "INFO  jepsen.util - 0\t:invoke\t:cas\t[1 2",
        "INFO  jepsen.util - 0\t:invoke\t:cas\t3",
        "INFO  jepsen.util - 0\t:invoke\t:write",
    ] {
        let text = format!("\n{bad}\n");
        let e = parse_jepsen_etcd(&text).expect_err(bad);
        assert_eq!(e.line, 2, "{bad}: {e}");
    }
}

#[test]
fn parses_kv_lines() {
    let text = r#"{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}
{:process 1, :type :invoke, :f :get, :key "0", :value nil}
{:process 0, :type :ok, :f :append, :key "0", :value "x 0 0 y"}
{:process 1, :type :ok, :f :get, :key "0", :value "x 0 0 y"}
{:process 2, :type :invoke, :f :put, :key "1", :value "a\"b"}
{:process 3, :type :invoke, :f :get, :key "1", :value nil}
{:process 2, :type :info, :f :put, :key "1", :value "a\"b"}
{:process 3, :type :ok, :f :get, :key "1", :value nil}
{:process 4, :type :invoke, :f :append, :key "1", :value "z"}
{:process 4, :type :fail, :f :append, :key "1", :value "z"}
{:type :invoke, :process 5, :f :get, :key 7, :value nil}
"#;
    let h = parse_jepsen_kv(text).expect("parses");
    let ops: Vec<_> = h.iter().cloned().collect();
    assert_eq!(
        ops,
        vec![
            Operation::returned(
                0,
                "0",
                AppendOp::Append("x 0 0 y".into()),
                1,
                3,
                AppendOutput::Ok
            ),
            Operation::returned(
                1,
                "0",
                AppendOp::Get,
                2,
                4,
                AppendOutput::Get("x 0 0 y".into())
            ),
            Operation::unknown(2, "1", AppendOp::Put("a\"b".into()), 5),
            Operation::returned(
                3,
                "1",
                AppendOp::Get,
                6,
                8,
                AppendOutput::Get(String::new())
            ),
            Operation::unknown(5, "7", AppendOp::Get, 11),
        ]
    );
    assert!(check(&h, SearchBudget::default()).is_linearizable());
}

#[test]
fn kv_errors_carry_line_numbers() {
    for bad in [
        "{:process 0, :type :invoke, :f :get, :key \"0\"}",
        "{:process 0, :type :invoke, :f :get, :key \"0\", :value nil",
        "{:process 0, :type :invoke, :f :get, :key \"0\", :value \"abc}",
        "{:process -1, :type :invoke, :f :get, :key \"0\", :value nil}",
        "{:process 0, :type :begin, :f :get, :key \"0\", :value nil}",
        "{:process 0, :type :invoke, :f :cas, :key \"0\", :value nil}",
        "{:process 0, :type :invoke, :f :put, :key \"0\", :value nil}",
        "{:process 0, :type :ok, :f :get, :key \"0\", :value nil}",
        "{:process 0, :type :invoke, :f :get, :key \"0\", :value [1 2]}",
        "{:process 0 :process 1, :type :invoke, :f :get, :key \"0\", :value nil}",
        "{:process 0, :type :invoke, :f :get, :key \"0\", :value nil} trailing",
        "[:process 0]",
    ] {
        let text =
            format!("{{:process 9, :type :invoke, :f :get, :key \"0\", :value nil}}\n{bad}\n");
        let e = parse_jepsen_kv(&text).expect_err(bad);
        assert_eq!(e.line, 2, "{bad}: {e}");
        assert!(e.to_string().starts_with("line 2: "), "{e}");
    }
}

fn done(
    client: u64,
    t: (u64, u64),
    input: RegisterOp,
    output: RegisterOutput,
) -> Operation<Register> {
    Operation::returned(client, "k", input, t.0, t.1, output)
}

fn history(ops: impl IntoIterator<Item = Operation<Register>>) -> History<Register> {
    let mut h = History::new();
    for op in ops {
        h.push(op).expect("valid interval");
    }
    h
}

#[test]
fn counterexample_names_the_stale_read() {
    let written = RegisterOutput::Written;
    let mut h = history([
        done(1, (0, 1), w(1), written),
        done(1, (2, 3), w(2), written),
        done(2, (4, 5), RegisterOp::Read, read(Some(1))),
    ]);
    h.push(Operation::returned(
        2,
        "other",
        RegisterOp::Read,
        4,
        5,
        read(None),
    ))
    .unwrap();
    let Verdict::NotLinearizable(cx) = check(&h, SearchBudget::default()) else {
        panic!("stale read accepted");
    };
    assert_eq!(cx.key, "k");
    assert_eq!(
        cx.culprit.outcome,
        Outcome::Returned {
            time: 5,
            output: read(Some(1))
        }
    );
    assert_eq!(cx.others_linearizable, Some(true));
    assert_eq!(cx.states_during, vec![Some(2)]);
    assert_eq!(cx.linearized.len(), 2);
    assert_eq!(cx.state, Some(2));
    assert_eq!(cx.candidates, vec![]);
    assert_eq!(cx.operations().len(), 3);
    let text = Verdict::NotLinearizable(cx).to_string();
    assert!(text.contains("key \"k\""), "{text}");
    assert!(
        text.contains("> client 2 read on \"k\" [t=4..5] -> 1"),
        "{text}"
    );
    assert!(
        text.contains("the key held, while it ran: Some(2)"),
        "{text}"
    );
}

#[test]
fn states_during_cover_the_whole_interval() {
    // The read overlaps three writes; the others alone are linearizable in invocation order,
    // so the read could have seen any of the states from before the first to after the last.
    let written = RegisterOutput::Written;
    let h = history([
        done(1, (0, 1), w(1), written),
        done(1, (3, 4), w(2), written),
        done(3, (5, 6), w(3), written),
        done(3, (8, 9), w(4), written),
        done(2, (2, 7), RegisterOp::Read, read(Some(9))),
    ]);
    let Verdict::NotLinearizable(cx) = check(&h, SearchBudget::default()) else {
        panic!("read of an unwritten value accepted");
    };
    assert_eq!(cx.culprit.client, 2);
    assert_eq!(cx.others_linearizable, Some(true));
    assert_eq!(cx.states_during, vec![Some(1), Some(2), Some(3)]);
}

#[test]
fn a_violation_among_others_is_reported_as_such() {
    // Two independent stale reads: removing either one leaves the other.
    let written = RegisterOutput::Written;
    let h = history([
        done(1, (0, 1), w(1), written),
        done(1, (2, 3), w(2), written),
        done(2, (4, 5), RegisterOp::Read, read(Some(1))),
        done(2, (6, 7), RegisterOp::Read, read(None)),
    ]);
    let Verdict::NotLinearizable(cx) = check(&h, SearchBudget::default()) else {
        panic!("stale reads accepted");
    };
    assert_eq!(cx.others_linearizable, Some(false));
    let text = Verdict::NotLinearizable(cx).to_string();
    assert!(text.contains("Even without it"), "{text}");
}

#[test]
fn budget_is_enforced() {
    let mut ops: Vec<_> = (0..20)
        .map(|c| done(c, (0, 100), w(c), RegisterOutput::Written))
        .collect();
    ops.push(done(99, (0, 100), RegisterOp::Read, read(Some(77))));
    let verdict = check(&history(ops), SearchBudget::steps(1000));
    assert!(
        matches!(&verdict, Verdict::BudgetExceeded { key, steps } if key == "k" && *steps > 1000),
        "{verdict:?}"
    );
    assert!(verdict.to_string().contains("budget"));
}

#[test]
fn interchangeable_timeouts_are_tried_once() {
    // 60 timed-out writes, 30 of 1 and 30 of 0, then 60 reads alternating between 1 and 0:
    // each write must take effect exactly when needed. Without collapsing identical writes
    // the search would try every one of them at every step.
    let mut ops: Vec<_> = (0..60)
        .map(|c| Operation::unknown(c, "k", w(c % 2), c))
        .collect();
    for i in 0..60 {
        let t = 100 + 2 * i;
        ops.push(done(
            100,
            (t, t + 1),
            RegisterOp::Read,
            read(Some(1 - i % 2)),
        ));
    }
    assert!(check(&history(ops.clone()), SearchBudget::steps(1_000_000)).is_linearizable());
    ops.push(done(100, (300, 301), RegisterOp::Read, read(Some(1))));
    assert!(check(&history(ops), SearchBudget::steps(1_000_000)).is_not_linearizable());
}

#[test]
fn history_event_api_tracks_pending_operations() {
    let mut h = History::<Register>::new();
    h.invoke(1, "k", w(1), 10).unwrap();
    assert_eq!(
        h.invoke(1, "k", w(2), 11),
        Err(HistoryError::ClientBusy { client: 1 })
    );
    assert_eq!(
        h.complete(1, RegisterOutput::Written, 5),
        Err(HistoryError::ReturnBeforeInvoke {
            client: 1,
            invoke_time: 10,
            return_time: 5
        })
    );
    // The failed completion left the operation pending.
    h.complete(1, RegisterOutput::Written, 12).unwrap();
    assert_eq!(
        h.complete(1, RegisterOutput::Written, 13),
        Err(HistoryError::NothingPending { client: 1 })
    );
    h.invoke(2, "k", w(3), 14).unwrap();
    h.discard(2).unwrap();
    h.invoke(3, "k", w(4), 15).unwrap();
    h.time_out(3).unwrap();
    h.invoke(4, "k", RegisterOp::Read, 16).unwrap();
    assert_eq!(
        h.time_out(2),
        Err(HistoryError::NothingPending { client: 2 })
    );
    assert_eq!(h.len(), 3);
    let outcomes: Vec<_> = h.iter().map(|op| (op.client, op.return_time())).collect();
    assert_eq!(outcomes, vec![(1, Some(12)), (3, None), (4, None)]);
    assert!(check(&h, SearchBudget::default()).is_linearizable());
}

fn swap(v: u64) -> RegisterOp {
    RegisterOp::Swap(Some(v))
}

fn replaced(v: Option<u64>) -> RegisterOutput {
    RegisterOutput::Swapped(v)
}

fn linearizable(ops: impl IntoIterator<Item = Operation<Register>>) -> bool {
    let verdict = check(&history(ops), SearchBudget::steps(1_000_000));
    assert!(
        verdict.is_linearizable() || verdict.is_not_linearizable(),
        "decided"
    );
    verdict.is_linearizable()
}

#[test]
fn two_concurrent_swaps_cannot_both_replace_the_same_value() {
    assert!(!linearizable([
        done(1, (0, 10), swap(1), replaced(None)),
        done(2, (0, 10), swap(2), replaced(None)),
    ]));
    assert!(linearizable([
        done(1, (0, 10), swap(1), replaced(None)),
        done(2, (0, 10), swap(2), replaced(Some(1))),
    ]));
}

#[test]
fn a_swap_returns_what_the_write_before_it_left_and_a_read_after_it_sees_its_value() {
    let written = RegisterOutput::Written;
    assert!(!linearizable([
        done(1, (0, 1), w(1), written),
        done(2, (2, 3), swap(2), replaced(None)),
    ]));
    assert!(!linearizable([
        done(1, (0, 1), swap(2), replaced(None)),
        done(2, (2, 3), RegisterOp::Read, read(None)),
    ]));
    assert!(linearizable([
        done(1, (0, 1), w(1), written),
        done(2, (2, 3), swap(2), replaced(Some(1))),
        done(3, (4, 5), RegisterOp::Read, read(Some(2))),
    ]));
}

#[test]
fn swaps_chain_in_one_order_only() {
    // 1 replaced nothing, 2 replaced 1, 3 replaced 2: one order explains it.
    assert!(linearizable([
        done(3, (0, 10), swap(3), replaced(Some(2))),
        done(2, (0, 10), swap(2), replaced(Some(1))),
        done(1, (0, 10), swap(1), replaced(None)),
    ]));
    // A cycle: 2 replaced 3 and 3 replaced 2.
    assert!(!linearizable([
        done(1, (0, 10), swap(1), replaced(None)),
        done(2, (0, 10), swap(2), replaced(Some(3))),
        done(3, (0, 10), swap(3), replaced(Some(2))),
    ]));
}

#[test]
fn a_swap_may_replace_what_a_timed_out_write_left() {
    // The search must try the timed-out write before the swap: a swap is a blind write in what
    // it leaves, but not in what it returned.
    assert!(linearizable([
        Operation::unknown(1, "k", w(7), 0),
        done(2, (5, 6), swap(2), replaced(Some(7))),
    ]));
    assert!(!linearizable([
        Operation::unknown(1, "k", w(7), 8),
        done(2, (5, 6), swap(2), replaced(Some(7))),
    ]));
    // Timed out itself, a swap may have taken effect (its value read later) or not.
    assert!(linearizable([
        Operation::unknown(1, "k", swap(4), 0),
        done(2, (5, 6), RegisterOp::Read, read(Some(4))),
        done(3, (7, 8), swap(5), replaced(Some(4))),
    ]));
}

#[test]
fn a_swap_whose_old_value_was_lost_counts_as_a_write() {
    let written = RegisterOutput::Written;
    assert!(linearizable([
        done(1, (0, 1), swap(3), written),
        done(2, (2, 3), RegisterOp::Read, read(Some(3))),
    ]));
    assert!(!linearizable([
        done(1, (0, 1), swap(3), written),
        done(2, (2, 3), RegisterOp::Read, read(None)),
    ]));
}
