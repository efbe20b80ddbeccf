//! The Wing–Gong search with Lowe's memoisation, one key at a time.
//!
//! The call and return entries of the returned operations form a doubly linked list in time
//! order. Walking it from the front, any call seen before the first return belongs to an
//! operation that may be linearized next (everything that must precede it has already been
//! linearized). Linearizing an operation unlinks its two entries; backtracking relinks them in
//! reverse order, which a doubly linked list does in O(1) ("dancing links"). The search keeps
//! its own stack, so history length is not limited by the thread's stack.
//!
//! Lowe's improvement: the pair (set of linearized operations, model state) fully determines
//! what can still happen, so every pair reached is remembered and never explored twice (see
//! [`Memo`], which extends this to timed-out operations). This is what turns the exponential
//! worst case into something practical.
//!
//! Operations with unknown outcome (timed out) respond at +infinity and may also never take
//! effect, so the search succeeds as soon as every *returned* operation is linearized; they are
//! linearized only in blocks right before a returned operation (see the `blocks` module).
//!
//! Two cheap rules cut the search further without losing linearizations: a returned read-only
//! operation that fits the current state is linearized at once (see [`Position::take_reads`]),
//! and a path is abandoned as soon as some returned operation's result can no longer be
//! explained by any continuation (see [`Model::may_still_return`]).

use super::blocks::{blocks, Block, Unknowns, Window};
use super::history::{Operation, Outcome};
use super::model::{Effect, Model};
use super::table::{Bits, Entries, Memo};

/// What the search of one key found.
pub(super) enum Search<'a, M: Model> {
    /// A linearization: every returned operation and the timed-out ones that took effect.
    Linearizable(Vec<&'a Operation<M>>),
    OutOfBudget,
    Stuck(DeadEnd<'a, M>),
}

/// The furthest point of a failed search.
pub(super) struct DeadEnd<'a, M: Model> {
    /// The longest valid prefix found (most returned operations), in order.
    pub linearized: Vec<&'a Operation<M>>,
    /// The state after it.
    pub state: M::State,
    /// The first operation to return among those not in `linearized`: it must go before any
    /// operation invoked after it returned, but no continuation could linearize it.
    pub blocked: &'a Operation<M>,
    /// Operations whose results some continuation of `linearized` made impossible to explain,
    /// in the order the search found them.
    pub doomed: Vec<&'a Operation<M>>,
    /// The operations that could go next after `linearized`.
    pub candidates: Vec<&'a Operation<M>>,
}

/// One node of the depth-first search: the configuration reached by a macro step, and how far
/// the enumeration of its children has got.
struct Frame<S> {
    /// Length of the trail before the macro step that created this node.
    trail_len: usize,
    /// The state before that macro step.
    prior: S,
    /// The next list entry to try as the returned operation of a child.
    cursor: usize,
    /// `None` while trying returned operations directly from the node's state; afterwards the
    /// blocks of timed-out operations to try before them, and the index of the current block.
    blocks: Option<(Vec<Block<S>>, usize)>,
    /// The operations that made children of this node unviable, without repeats.
    doomed: Vec<usize>,
}

/// What the search of one key knows up front.
struct Context<'a, 'o, M: Model> {
    /// The key's operations in invocation order.
    ops: &'a [&'o Operation<M>],
    returned: &'a [bool],
    /// Returned operations that never change the state (see [`Model::is_read_only`]).
    read_only: &'a [bool],
    unknowns: &'a Unknowns<M::State>,
    /// Returned operations that [`Model::constrains`], in invocation order.
    constraining: &'a [usize],
    /// The operations that are not [monotone](Model::is_monotone) and may change the state, in
    /// invocation order, with the state they leave if the model says ([`Model::effect`]).
    resets: &'a [(usize, Option<M::State>)],
    returned_ops: usize,
}

/// The mutable position of the search: what is linearized, in which order.
struct Position<M: Model> {
    entries: Entries,
    linearized: Bits,
    /// Per class of timed-out operations: how many are linearized.
    used: Vec<usize>,
    state: M::State,
    /// Every linearized operation, in linearization order.
    trail: Vec<usize>,
    /// How many returned operations are linearized.
    done: usize,
}

impl<M: Model> Position<M> {
    fn linearize(&mut self, ctx: &Context<'_, '_, M>, i: usize) {
        self.linearized.set(i);
        if ctx.returned[i] {
            self.entries.unlink(i);
            self.entries.unlink(self.entries.n + i);
            self.done += 1;
        } else {
            self.used[ctx.unknowns.class_of[i]] += 1;
        }
        self.trail.push(i);
    }

    /// Undoes linearizations, most recent first, until `trail_len` remain.
    fn undo_to(&mut self, ctx: &Context<'_, '_, M>, trail_len: usize) {
        while self.trail.len() > trail_len {
            let Some(i) = self.trail.pop() else { break };
            if ctx.returned[i] {
                self.entries.relink(self.entries.n + i);
                self.entries.relink(i);
                self.done -= 1;
            } else {
                self.used[ctx.unknowns.class_of[i]] -= 1;
            }
            self.linearized.clear(i);
        }
    }

    /// Linearizes every returned read-only operation that may go next and fits the current
    /// state, until none is left.
    ///
    /// This never loses a linearization: if one exists, moving such an operation from its
    /// place in it to here keeps it valid, because the operation does not change the state and
    /// everything that must precede it in real time is already linearized. It spares the
    /// search from trying every interleaving of concurrent reads.
    fn take_reads(&mut self, ctx: &Context<'_, '_, M>, steps: &mut u64) {
        let mut e = self.entries.first();
        while e < self.entries.n {
            let next = self.entries.next[e];
            if ctx.read_only[e] {
                *steps += 1;
                if let Outcome::Returned { output, .. } = &ctx.ops[e].outcome {
                    if M::step(&self.state, &ctx.ops[e].input, output).is_some() {
                        self.linearize(ctx, e);
                        // Its return entry is gone, so later calls may have become candidates.
                        e = self.entries.first();
                        continue;
                    }
                }
            }
            e = next;
        }
    }

    /// Checks that every returned, unlinearized operation may still be linearized later
    /// according to [`Model::may_still_return`], from the current state or from the state
    /// left by an operation that could still come before it; returns the first one that
    /// cannot. An operation is exempt while an operation with an unknown effect could still
    /// come before it.
    fn viable(&self, ctx: &Context<'_, '_, M>, steps: &mut u64) -> Result<(), usize> {
        let resets = ctx.resets.iter().filter(|r| !self.linearized.get(r.0));
        'ops: for &i in ctx.constraining {
            if self.linearized.get(i) {
                continue;
            }
            let op = ctx.ops[i];
            let Outcome::Returned { time, output } = &op.outcome else {
                continue;
            };
            *steps += 1;
            if M::may_still_return(&self.state, &op.input, output) {
                continue;
            }
            for (r, leaves) in resets.clone() {
                if ctx.ops[*r].invoke_time > *time {
                    break;
                }
                match leaves {
                    None => continue 'ops,
                    Some(state) if M::may_still_return(state, &op.input, output) => continue 'ops,
                    Some(_) => {}
                }
            }
            return Err(i);
        }
        Ok(())
    }

    fn window<'a>(&'a self, ctx: &'a Context<'a, '_, M>) -> Window<'a, M> {
        Window {
            ops: ctx.ops,
            unknowns: ctx.unknowns,
            entries: &self.entries,
            used: &self.used,
            state: &self.state,
        }
    }
}

/// Searches one key's operations for a linearization, spending from `steps`.
///
/// A child of a node linearizes one returned operation, optionally preceded by a block of
/// timed-out operations and followed by the reads that fit (see [`Position::take_reads`]):
/// every linearization can be rearranged into such steps once timed-out operations after the
/// last returned one are dropped, which they can be.
#[expect(clippy::too_many_lines)]
pub(super) fn search<'o, M: Model>(
    ops: &[&'o Operation<M>],
    steps_max: u64,
    steps: &mut u64,
) -> Search<'o, M> {
    // Invocation order makes "earliest of a group of interchangeable operations" well defined.
    let mut ops = ops.to_vec();
    ops.sort_by_key(|op| op.invoke_time);
    let ops = ops;
    let n = ops.len();
    let returned: Vec<bool> = ops.iter().map(|op| op.return_time().is_some()).collect();
    let read_only: Vec<bool> = ops
        .iter()
        .map(|op| match &op.outcome {
            Outcome::Returned { output, .. } => M::is_read_only(&op.input, Some(output)),
            Outcome::Unknown => false,
        })
        .collect();
    let constraining: Vec<usize> = (0..n)
        .filter(|&i| match &ops[i].outcome {
            Outcome::Returned { output, .. } => M::constrains(&ops[i].input, output),
            Outcome::Unknown => false,
        })
        .collect();
    let resets: Vec<_> = (0..n)
        .filter(|&i| !M::is_monotone(&ops[i].input))
        .filter_map(|i| match M::effect(&ops[i].input) {
            Effect::Keep => None,
            Effect::Set(state) | Effect::Swap { to: state, .. } => Some((i, Some(state))),
            Effect::Other => Some((i, None)),
        })
        .collect();
    let unknowns = Unknowns::new(&ops);
    let ctx = Context {
        ops: &ops,
        returned: &returned,
        read_only: &read_only,
        unknowns: &unknowns,
        constraining: &constraining,
        resets: &resets,
        returned_ops: returned.iter().filter(|&&r| r).count(),
    };

    let mut pos = Position::<M> {
        entries: Entries::new(&ops),
        linearized: Bits::new(n),
        used: vec![0; unknowns.classes()],
        state: M::init(),
        trail: Vec::new(),
        done: 0,
    };
    pos.take_reads(&ctx, steps);
    let mut returned_mask = Bits::new(n);
    for i in (0..n).filter(|&i| returned[i]) {
        returned_mask.set(i);
    }
    let mut memo = Memo::new(returned_mask);
    let mut deepest: Option<(usize, DeadEnd<'o, M>)> = None;
    let mut stack = vec![Frame {
        trail_len: 0,
        prior: pos.state.clone(),
        cursor: pos.entries.first(),
        blocks: None,
        doomed: Vec::new(),
    }];

    loop {
        if pos.done == ctx.returned_ops {
            return Search::Linearizable(pos.trail.iter().map(|&i| ops[i]).collect());
        }
        *steps += 1;
        if *steps > steps_max {
            return Search::OutOfBudget;
        }
        let top = stack.len() - 1;
        let frame = &mut stack[top];
        let c = frame.cursor;
        if c < n {
            frame.cursor = pos.entries.next[c];
            let Outcome::Returned { output, .. } = &ops[c].outcome else {
                continue;
            };
            let (from, block): (&M::State, &[usize]) = match &frame.blocks {
                None => (&pos.state, &[]),
                Some((blocks, b)) => (&blocks[*b].state, &blocks[*b].ops),
            };
            let Some(next_state) = M::step(from, &ops[c].input, output) else {
                continue;
            };
            let trail_len = pos.trail.len();
            for &u in block {
                pos.linearize(&ctx, u);
            }
            pos.linearize(&ctx, c);
            let prior = std::mem::replace(&mut pos.state, next_state);
            pos.take_reads(&ctx, steps);
            let fresh = match pos.viable(&ctx, steps) {
                Ok(()) => memo.insert(&pos.linearized, &pos.state),
                Err(doomed) => {
                    if !stack[top].doomed.contains(&doomed) {
                        stack[top].doomed.push(doomed);
                    }
                    false
                }
            };
            if fresh {
                let cursor = pos.entries.first();
                let doomed = Vec::new();
                stack.push(Frame {
                    trail_len,
                    prior,
                    cursor,
                    blocks: None,
                    doomed,
                });
            } else {
                pos.undo_to(&ctx, trail_len);
                pos.state = prior;
            }
            continue;
        }

        // The cursor reached the first return entry: every candidate has been tried after the
        // current block. Move on to the next block, computing them when first needed.
        match &mut frame.blocks {
            None => {
                let Some(blocks) = blocks(&pos.window(&ctx), steps_max, steps) else {
                    return Search::OutOfBudget;
                };
                if !blocks.is_empty() {
                    frame.blocks = Some((blocks, 0));
                    frame.cursor = pos.entries.first();
                    continue;
                }
            }
            Some((blocks, b)) if *b + 1 < blocks.len() => {
                *b += 1;
                frame.cursor = pos.entries.first();
                continue;
            }
            Some(_) => {}
        }

        // Every child failed: backtrack.
        if deepest.as_ref().is_none_or(|(d, _)| pos.done > *d) {
            deepest = Some((pos.done, dead_end(&ctx, &pos, &frame.doomed)));
        }
        let Some(frame) = stack.pop().filter(|_| top > 0) else {
            let Some((_, dead)) = deepest else {
                // While a returned operation is unlinearized its return entry is in the list,
                // so a dead end is always recorded before the root is exhausted.
                unreachable!("linearizability search failed without a dead end");
            };
            return Search::Stuck(dead);
        };
        pos.undo_to(&ctx, frame.trail_len);
        pos.state = frame.prior;
    }
}

/// Describes the current position as a dead end: all its continuations failed.
fn dead_end<'o, M: Model>(
    ctx: &Context<'_, 'o, M>,
    pos: &Position<M>,
    doomed: &[usize],
) -> DeadEnd<'o, M> {
    let mut candidates = Vec::new();
    let mut e = pos.entries.first();
    while e < pos.entries.n {
        candidates.push(ctx.ops[e]);
        e = pos.entries.next[e];
    }
    // The search only backtracks while some returned operation is unlinearized, so the walk
    // stopped at the return entry of the first of them to return.
    let blocked = ctx.ops[e.wrapping_sub(pos.entries.n)];
    let deadline = blocked.return_time().unwrap_or(u64::MAX);
    let mut pending: Vec<usize> = ctx
        .unknowns
        .all()
        .filter(|&u| !pos.linearized.get(u) && ctx.ops[u].invoke_time <= deadline)
        .collect();
    pending.sort_unstable();
    candidates.extend(pending.into_iter().map(|u| ctx.ops[u]));
    DeadEnd {
        linearized: pos.trail.iter().map(|&i| ctx.ops[i]).collect(),
        state: pos.state.clone(),
        blocked,
        doomed: doomed.iter().map(|&i| ctx.ops[i]).collect(),
        candidates,
    }
}
