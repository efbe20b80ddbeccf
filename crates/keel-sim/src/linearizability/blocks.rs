//! Timed-out operations: which of them could take effect next, and in which combinations.
//!
//! A timed-out operation may take effect at any time after its invocation, or never, so the
//! search never has to linearize one except to explain a returned operation that comes right
//! after it. Each search step therefore linearizes one returned operation, optionally preceded
//! by a *block* of timed-out operations. Only blocks worth trying are produced:
//!
//! - a block is dropped if a block made of a subset of its operations reaches the same state
//!   (the unused operations stay available), which is why blocks are built breadth-first;
//! - of several timed-out operations with equal inputs (a *class*), which are interchangeable
//!   once invoked, the earliest unused one is always taken;
//! - nothing is put before a blind write ([`Effect::Set`]), which would erase it;
//! - when the model describes its effects ([`Model::effect`]) and the returned operations that
//!   may go next name the state they need ([`Model::required_state`]), only blocks reaching
//!   those states are built, found through indexes instead of by trying every operation.

use std::collections::{HashMap, HashSet};

use super::history::{Operation, Outcome};
use super::model::{Effect, Model};
use super::table::{Entries, MixBuild, NIL};

/// A sequence of timed-out operations that takes the state from a node's state to `state`.
#[derive(Clone)]
pub(super) struct Block<S> {
    pub(super) state: S,
    /// In application order.
    pub(super) ops: Vec<usize>,
}

/// The timed-out operations of one key, grouped and indexed.
pub(super) struct Unknowns<S> {
    /// Per operation: its class, or `NIL` for returned operations.
    pub(super) class_of: Vec<usize>,
    /// Per class: its operations in invocation order.
    members: Vec<Vec<usize>>,
    /// Per class: the effect of its input.
    effect: Vec<Effect<S>>,
    /// Classes whose effect is [`Effect::Set`], by the state they set.
    set_by_state: HashMap<S, Vec<usize>, MixBuild>,
    /// Classes whose effect is [`Effect::Swap`], by the state they apply to.
    swap_by_from: HashMap<S, Vec<usize>, MixBuild>,
    /// Classes whose effect is [`Effect::Swap`], by the state they leave.
    swap_by_to: HashMap<S, Vec<usize>, MixBuild>,
    /// Whether some class has [`Effect::Other`], which the indexes cannot describe.
    has_other: bool,
}

impl<S: Clone + Eq + std::hash::Hash> Unknowns<S> {
    /// Indexes the operations of `ops` (sorted by invocation) that never returned.
    pub(super) fn new<M: Model<State = S>>(ops: &[&Operation<M>]) -> Self {
        let mut class_of = vec![NIL; ops.len()];
        let mut by_input: HashMap<&M::Input, usize, MixBuild> = HashMap::default();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if op.return_time().is_none() {
                let class = *by_input.entry(&op.input).or_insert_with(|| {
                    members.push(Vec::new());
                    members.len() - 1
                });
                members[class].push(i);
                class_of[i] = class;
            }
        }
        let mut unknowns = Unknowns {
            class_of,
            effect: Vec::with_capacity(members.len()),
            members,
            set_by_state: HashMap::default(),
            swap_by_from: HashMap::default(),
            swap_by_to: HashMap::default(),
            has_other: false,
        };
        for class in 0..unknowns.members.len() {
            let effect = M::effect(&ops[unknowns.members[class][0]].input);
            match &effect {
                Effect::Keep => {}
                Effect::Set(s) => unknowns
                    .set_by_state
                    .entry(s.clone())
                    .or_default()
                    .push(class),
                Effect::Swap { from, to } => {
                    unknowns
                        .swap_by_from
                        .entry(from.clone())
                        .or_default()
                        .push(class);
                    unknowns
                        .swap_by_to
                        .entry(to.clone())
                        .or_default()
                        .push(class);
                }
                Effect::Other => unknowns.has_other = true,
            }
            unknowns.effect.push(effect);
        }
        unknowns
    }

    /// The number of classes.
    pub(super) fn classes(&self) -> usize {
        self.members.len()
    }

    /// The operations of every class, earliest first.
    pub(super) fn all(&self) -> impl Iterator<Item = usize> + '_ {
        self.members.iter().flatten().copied()
    }
}

/// What [`blocks`] needs to know about the search position.
pub(super) struct Window<'a, M: Model> {
    /// The key's operations, sorted by invocation.
    pub(super) ops: &'a [&'a Operation<M>],
    pub(super) unknowns: &'a Unknowns<M::State>,
    pub(super) entries: &'a Entries,
    /// Per class: how many of its operations are linearized (always the earliest ones).
    pub(super) used: &'a [usize],
    /// The current state.
    pub(super) state: &'a M::State,
}

impl<M: Model> Window<'_, M> {
    /// The next unused operation of `class`, skipping `taken` more, if it was invoked by
    /// `deadline` (the time of the first pending return).
    fn next_of(&self, class: usize, taken: usize, deadline: u64) -> Option<usize> {
        let op = *self.unknowns.members[class].get(self.used[class] + taken)?;
        (self.ops[op].invoke_time <= deadline).then_some(op)
    }

    fn next_in_block(&self, class: usize, block: &Block<M::State>, deadline: u64) -> Option<usize> {
        let taken = block
            .ops
            .iter()
            .filter(|&&u| self.unknowns.class_of[u] == class)
            .count();
        self.next_of(class, taken, deadline)
    }
}

/// Breadth-first construction of blocks with dominance: a block is kept only if no kept block
/// reaching the same state uses a subset of its operations.
struct Builder<S> {
    kept: HashMap<S, Vec<Vec<usize>>, MixBuild>,
    next: Vec<Block<S>>,
    steps_max: u64,
}

impl<S: Clone + Eq + std::hash::Hash> Builder<S> {
    /// Considers `block` extended by `op`, leading to `state`. `false` if out of budget.
    fn offer(&mut self, block: &Block<S>, op: usize, state: S, steps: &mut u64) -> bool {
        let sets = self.kept.entry(state.clone()).or_default();
        // Dominance checks cost time too, so they count against the budget.
        *steps += 1 + sets.len() as u64;
        if *steps > self.steps_max {
            return false;
        }
        if sets
            .iter()
            .any(|s| s.iter().all(|x| *x == op || block.ops.contains(x)))
        {
            return true;
        }
        let mut ops = Vec::with_capacity(block.ops.len() + 1);
        ops.extend_from_slice(&block.ops);
        ops.push(op);
        sets.push(ops.clone());
        self.next.push(Block { state, ops });
        true
    }
}

/// The blocks worth trying before the returned operations that may go next, or `None` if the
/// budget ran out.
#[expect(clippy::too_many_lines)]
pub(super) fn blocks<M: Model>(
    window: &Window<'_, M>,
    steps_max: u64,
    steps: &mut u64,
) -> Option<Vec<Block<M::State>>> {
    let (ops, entries, unknowns) = (window.ops, window.entries, window.unknowns);
    let first_return = entries.first_return();
    if first_return == NIL || unknowns.classes() == 0 {
        return Some(Vec::new());
    }
    let deadline = ops[first_return - entries.n]
        .return_time()
        .unwrap_or(u64::MAX);

    // What do the candidates need? A target state; or, for a read-only operation without one,
    // any state it fits (a block needs to go only as far as the first such state: the
    // operation can go there and the rest of the block after it); or anything at all.
    let mut targets: HashSet<M::State, MixBuild> = HashSet::default();
    let mut first_fit: Vec<(&M::Input, &M::Output)> = Vec::new();
    let mut anything = false;
    let mut e = entries.first();
    while e < entries.n {
        let op = ops[e];
        e = entries.next[e];
        let Outcome::Returned { output, .. } = &op.outcome else {
            continue;
        };
        let required = M::required_state(&op.input, output);
        if let (Effect::Set(_), None) = (M::effect(&op.input), &required) {
            // Anything before a blind write is erased: the write alone does as well. (A swap
            // that returned the old value needed that value: it has a required state.)
            continue;
        }
        match required {
            Some(state) if state == *window.state => {}
            Some(state) => {
                targets.insert(state);
            }
            None if M::is_read_only(&op.input, Some(output)) => first_fit.push((&op.input, output)),
            None => anything = true,
        }
    }
    if !anything && first_fit.is_empty() && targets.is_empty() {
        return Some(Vec::new());
    }

    let root = Block {
        state: window.state.clone(),
        ops: Vec::new(),
    };
    let mut builder = Builder {
        kept: HashMap::default(),
        next: Vec::new(),
        steps_max,
    };
    builder.kept.insert(root.state.clone(), vec![Vec::new()]);
    let mut out = Vec::new();

    if anything || unknowns.has_other {
        // Nothing to aim at or nothing to index by: every available class, breadth first.
        let mut frontier = vec![root];
        while !frontier.is_empty() {
            for block in &frontier {
                for class in 0..unknowns.classes() {
                    if !block.ops.is_empty() && matches!(unknowns.effect[class], Effect::Set(_)) {
                        continue;
                    }
                    let Some(op) = window.next_in_block(class, block, deadline) else {
                        continue;
                    };
                    let Some(state) = M::step_unobserved(&block.state, &ops[op].input) else {
                        continue;
                    };
                    if !builder.offer(block, op, state, steps) {
                        return None;
                    }
                }
            }
            frontier = std::mem::take(&mut builder.next);
            out.extend(frontier.iter().cloned());
        }
        return Some(out);
    }

    // Every effect is Keep, Set or Swap: a useful block is at most one blind write followed by
    // a chain of swaps. Towards the targets, only states from which a chain of available swaps
    // reaches one are worth visiting.
    let mut reach = targets.clone();
    let mut todo: Vec<M::State> = targets.iter().cloned().collect();
    while let Some(to) = todo.pop() {
        for &class in unknowns.swap_by_to.get(&to).into_iter().flatten() {
            if let Effect::Swap { from, .. } = &unknowns.effect[class] {
                if window.next_of(class, 0, deadline).is_some() && reach.insert(from.clone()) {
                    todo.push(from.clone());
                }
            }
        }
    }
    let fits = |state: &M::State| {
        first_fit
            .iter()
            .any(|(i, o)| M::step(state, i, o).is_some())
    };
    // Whether a block reaching `state` should be kept, and whether it may be extended.
    let useful = |state: &M::State| targets.contains(state) || fits(state);
    let unfit = !first_fit.is_empty() && !fits(window.state);
    let extend = |from: &M::State, to: &M::State| reach.contains(to) || (unfit && !fits(from));

    // Level one: blind writes.
    let sets: Vec<usize> = if unfit {
        unknowns.set_by_state.values().flatten().copied().collect()
    } else {
        reach
            .iter()
            .flat_map(|s| unknowns.set_by_state.get(s).into_iter().flatten().copied())
            .collect()
    };
    for class in sets {
        let (Some(op), Effect::Set(state)) =
            (window.next_of(class, 0, deadline), &unknowns.effect[class])
        else {
            continue;
        };
        if state != window.state && !builder.offer(&root, op, state.clone(), steps) {
            return None;
        }
    }
    // Then chains of swaps, from the current state or a blind write.
    let mut frontier = vec![root];
    frontier.append(&mut builder.next);
    out.extend(frontier.iter().skip(1).cloned());
    while !frontier.is_empty() {
        for block in &frontier {
            for &class in unknowns
                .swap_by_from
                .get(&block.state)
                .into_iter()
                .flatten()
            {
                let Effect::Swap { to, .. } = &unknowns.effect[class] else {
                    continue;
                };
                if to == &block.state || !extend(&block.state, to) {
                    continue;
                }
                let Some(op) = window.next_in_block(class, block, deadline) else {
                    continue;
                };
                if !builder.offer(block, op, to.clone(), steps) {
                    return None;
                }
            }
        }
        frontier = std::mem::take(&mut builder.next);
        out.extend(frontier.iter().cloned());
    }
    out.retain(|b| useful(&b.state));
    Some(out)
}
