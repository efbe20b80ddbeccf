//! The public face of the checker: the budget, [`check`], and the explained verdict.

use std::collections::BTreeMap;
use std::fmt;

use super::history::{History, Key, Operation};
use super::model::Model;
use super::search::{search, DeadEnd, Search};

/// How much work [`check`] may do before giving up.
///
/// Checking linearizability is NP-complete; a pathological history (huge concurrency, many
/// timed-out operations) could search for hours. A budget turns that into an explicit
/// [`Verdict::BudgetExceeded`] so a simulator run never silently hangs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchBudget {
    /// Search steps allowed over all keys of one history, including the rechecks that
    /// explain a violation. A step is one elementary move: trying an operation next, adding a
    /// timed-out operation to a block, checking whether a result can still be explained, or
    /// backtracking. A step costs from a few to a few hundred nanoseconds.
    pub steps_max: u64,
}

impl SearchBudget {
    /// No limit at all.
    pub const UNLIMITED: SearchBudget = SearchBudget {
        steps_max: u64::MAX,
    };

    /// At most `steps_max` search steps.
    pub const fn steps(steps_max: u64) -> Self {
        SearchBudget { steps_max }
    }
}

impl Default for SearchBudget {
    /// 100 million steps: at most tens of seconds of work, far more than realistic histories
    /// need (the 108 reference histories together take under a million).
    fn default() -> Self {
        SearchBudget::steps(100_000_000)
    }
}

/// Why one key's operations admit no linearization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counterexample<M: Model> {
    /// The key whose operations are not linearizable.
    pub key: Key,
    /// The operation the search could not account for: its result is impossible after every
    /// order of the operations that must precede it.
    pub culprit: Operation<M>,
    /// Whether the key's other operations are linearizable once `culprit` is removed:
    /// `Some(true)` means `culprit` alone contradicts all of them; `None` when the budget ran out
    /// before that was settled.
    pub others_linearizable: Option<bool>,
    /// When `others_linearizable` is `Some(true)`: the states the key went through while
    /// `culprit` was running, in one linearization of the other operations. These are the
    /// states `culprit` could have acted on, and its result fits none of them.
    pub states_during: Vec<M::State>,
    /// The longest valid order of operations the search found (it maximises the number of
    /// returned operations), in linearization order. Timed-out operations appear only where the
    /// search let them take effect.
    pub linearized: Vec<Operation<M>>,
    /// The model state after `linearized`.
    pub state: M::State,
    /// The operations other than `culprit` that could have gone next after `linearized`
    /// (invoked before the first return among the remaining operations); no continuation
    /// through them leads to a linearization.
    pub candidates: Vec<Operation<M>>,
    /// How many returned operations the key has in total.
    pub returned_ops: usize,
}

impl<M: Model> Counterexample<M> {
    /// The operations a reader should look at: the culprit first, then the candidates that
    /// could have gone next, then the linearized prefix (most recent first).
    pub fn operations(&self) -> Vec<&Operation<M>> {
        std::iter::once(&self.culprit)
            .chain(&self.candidates)
            .chain(self.linearized.iter().rev())
            .collect()
    }
}

/// The answer of [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict<M: Model> {
    /// Every key's operations have a linearization.
    Linearizable,
    /// Some key's operations have none; the first such key (in key order) is explained.
    NotLinearizable(Box<Counterexample<M>>),
    /// The search ran out of budget on `key` before reaching a verdict, and no key checked
    /// before it was found non-linearizable.
    BudgetExceeded {
        /// The key being searched when the budget ran out.
        key: Key,
        /// Steps spent in total.
        steps: u64,
    },
}

impl<M: Model> Verdict<M> {
    /// Whether the verdict is [`Verdict::Linearizable`].
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }

    /// Whether the verdict is [`Verdict::NotLinearizable`].
    pub fn is_not_linearizable(&self) -> bool {
        matches!(self, Verdict::NotLinearizable(_))
    }
}

/// How many operations or states of a list a [`Verdict`]'s `Display` shows.
const SHOWN: usize = 10;

/// Writes at most the last [`SHOWN`] operations, one per line.
fn write_ops<M: Model>(f: &mut fmt::Formatter<'_>, ops: &[Operation<M>]) -> fmt::Result {
    let skipped = ops.len().saturating_sub(SHOWN);
    if skipped > 0 {
        writeln!(f, "    ... {skipped} earlier")?;
    }
    for op in &ops[skipped..] {
        writeln!(f, "    {op}")?;
    }
    Ok(())
}

impl<M: Model> fmt::Display for Verdict<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cx = match self {
            Verdict::Linearizable => return f.write_str("linearizable"),
            Verdict::BudgetExceeded { key, steps } => {
                return write!(
                    f,
                    "undecided: search budget exhausted after {steps} steps while checking key \
                     {key:?}"
                );
            }
            Verdict::NotLinearizable(cx) => cx,
        };
        writeln!(
            f,
            "not linearizable: on key {:?} no order of the operations explains",
            cx.key
        )?;
        writeln!(f, "  > {}", cx.culprit)?;
        match cx.others_linearizable {
            Some(true) => {
                write!(
                    f,
                    "Without it the key's other operations are linearizable; in one such order \
                     the key held, while it ran: "
                )?;
                for (i, state) in cx.states_during.iter().take(SHOWN).enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{state:?}")?;
                }
                if cx.states_during.len() > SHOWN {
                    write!(f, ", ...")?;
                }
                writeln!(f)?;
            }
            Some(false) => writeln!(
                f,
                "Even without it the key's other operations are not linearizable."
            )?,
            None => writeln!(
                f,
                "(Budget ran out checking the other operations without it.)"
            )?,
        }
        let done = cx
            .linearized
            .iter()
            .filter(|op| op.return_time().is_some())
            .count();
        writeln!(
            f,
            "The furthest the search got: a valid order of {done} of the key's {} returned \
             operations ({} in all), leaving the state at {:?}:",
            cx.returned_ops,
            cx.linearized.len(),
            cx.state
        )?;
        write_ops(f, &cx.linearized)?;
        if cx.candidates.is_empty() {
            writeln!(f, "No operation could go next.")
        } else {
            writeln!(
                f,
                "Every continuation through the operations that could go next fails:"
            )?;
            write_ops(f, &cx.candidates)
        }
    }
}

/// Decides whether `history` is linearizable with respect to the model `M`.
///
/// Keys are checked independently in key order (linearizability is compositional, so the
/// history is linearizable iff every key's operations are); the first non-linearizable key
/// decides the verdict. If the budget runs out on some key, the remaining keys are not checked:
/// [`Verdict::BudgetExceeded`] already tells the caller the answer is incomplete.
pub fn check<M: Model>(history: &History<M>, budget: SearchBudget) -> Verdict<M> {
    let mut partitions: BTreeMap<&str, Vec<&Operation<M>>> = BTreeMap::new();
    for op in history.iter() {
        if op.return_time().is_none() && M::is_read_only(&op.input, None) {
            // May have happened or not, and would not have changed anything: no constraint.
            continue;
        }
        partitions.entry(op.key.as_str()).or_default().push(op);
    }
    let mut steps = 0u64;
    for (key, ops) in partitions {
        let before = steps;
        match search(&ops, budget.steps_max, &mut steps) {
            Search::Linearizable(_) => {}
            Search::OutOfBudget => {
                return Verdict::BudgetExceeded {
                    key: key.to_owned(),
                    steps,
                };
            }
            Search::Stuck(dead) => {
                let used = steps - before;
                let cx = explain(key, &ops, dead, used, budget.steps_max, &mut steps);
                return Verdict::NotLinearizable(Box::new(cx));
            }
        }
    }
    Verdict::Linearizable
}

/// How many operations [`explain`] tries removing.
const SUSPECTS_MAX: usize = 8;

/// Steps [`explain`] may always spend, on top of a multiple of what the failed search took.
const EXPLAIN_STEPS: u64 = 1_000_000;

/// An operation that may be solely responsible for a violation, and what rechecking the
/// history without it found.
struct Suspect<'a, M: Model> {
    op: &'a Operation<M>,
    others_linearizable: Option<bool>,
    states_during: Vec<M::State>,
}

impl<M: Model> Suspect<'_, M> {
    /// Confirmed (2) beats undecided (1) beats refuted (0).
    fn rank(&self) -> u8 {
        match self.others_linearizable {
            Some(true) => 2,
            None => 1,
            Some(false) => 0,
        }
    }
}

/// Turns the search's dead end into a [`Counterexample`], first trying to pin the violation
/// on a single operation: one whose removal makes the rest linearizable.
///
/// The suspects are the operations the search found unexplainable at its dead end, then the
/// one it could not get past. Rechecking without a suspect can be much harder than finding the
/// violation was, so it gets a budget proportional to the search that found the violation
/// (`used` steps), within what is left of `steps_max`.
fn explain<M: Model>(
    key: &str,
    ops: &[&Operation<M>],
    dead: DeadEnd<'_, M>,
    used: u64,
    steps_max: u64,
    steps: &mut u64,
) -> Counterexample<M> {
    let mut suspects: Vec<&Operation<M>> = Vec::new();
    for op in dead.doomed.iter().copied().chain([dead.blocked]) {
        if suspects.len() < SUSPECTS_MAX && !suspects.iter().any(|s| std::ptr::eq(*s, op)) {
            suspects.push(op);
        }
    }
    let allowance = used.saturating_mul(4).saturating_add(EXPLAIN_STEPS);
    let limit = steps_max.min(steps.saturating_add(allowance));
    // The best suspect so far: a confirmed one beats an undecided one beats a refuted one.
    let mut best: Option<Suspect<'_, M>> = None;
    for &op in &suspects {
        let others: Vec<&Operation<M>> = ops
            .iter()
            .copied()
            .filter(|o| !std::ptr::eq(*o, op))
            .collect();
        let found = match search(&others, limit, steps) {
            Search::Linearizable(order) => Suspect {
                op,
                others_linearizable: Some(true),
                states_during: states_while_running(op, &order),
            },
            Search::Stuck(_) => Suspect {
                op,
                others_linearizable: Some(false),
                states_during: vec![],
            },
            Search::OutOfBudget => Suspect {
                op,
                others_linearizable: None,
                states_during: vec![],
            },
        };
        if best.as_ref().is_none_or(|b| found.rank() > b.rank()) {
            best = Some(found);
        }
        if *steps >= limit || best.as_ref().is_some_and(|b| b.rank() == 2) {
            break;
        }
    }
    let Suspect {
        op: culprit,
        others_linearizable,
        states_during,
    } = best.unwrap_or(Suspect {
        op: dead.blocked,
        others_linearizable: None,
        states_during: Vec::new(),
    });
    Counterexample {
        key: key.to_owned(),
        culprit: culprit.clone(),
        others_linearizable,
        states_during,
        linearized: dead.linearized.into_iter().cloned().collect(),
        state: dead.state,
        candidates: dead
            .candidates
            .into_iter()
            .filter(|op| !std::ptr::eq(*op, culprit))
            .cloned()
            .collect(),
        returned_ops: ops.iter().filter(|op| op.return_time().is_some()).count(),
    }
}

/// The distinct consecutive states of the linearization `order` at the points where `op` could
/// be inserted in it: after every operation that returned before `op` was invoked, and before
/// every operation invoked after `op` returned.
fn states_while_running<M: Model>(op: &Operation<M>, order: &[&Operation<M>]) -> Vec<M::State> {
    let first = order
        .iter()
        .rposition(|o| o.return_time().is_some_and(|t| t < op.invoke_time))
        .map_or(0, |i| i + 1);
    let end = op.return_time().unwrap_or(u64::MAX);
    let last = order
        .iter()
        .position(|o| o.invoke_time > end)
        .unwrap_or(order.len());
    let mut state = M::init();
    let mut states: Vec<M::State> = Vec::new();
    for (i, o) in order.iter().enumerate() {
        if i >= first && states.last() != Some(&state) {
            states.push(state.clone());
        }
        if i >= last {
            break;
        }
        let next = match &o.outcome {
            super::history::Outcome::Returned { output, .. } => M::step(&state, &o.input, output),
            super::history::Outcome::Unknown => M::step_unobserved(&state, &o.input),
        };
        // The order is a linearization, so every step succeeds.
        state = next.unwrap_or(state);
    }
    if order.len() <= last && order.len() >= first && states.last() != Some(&state) {
        states.push(state);
    }
    states
}
