//! The Wing–Gong search with Lowe's memoisation, one key at a time.
//!
//! Every operation contributes a *call* entry at its invocation time and, if it returned, a
//! *return* entry at its response time; the entries form a doubly linked list in time order.
//! Walking the list from the front, any call seen before the first return belongs to an
//! operation that may be linearized next (everything that must precede it has already been
//! linearized). Linearizing an operation unlinks its two entries; backtracking relinks them in
//! reverse order, which a doubly linked list does in O(1) ("dancing links"). The search keeps
//! its own stack, so history length is not limited by the thread's stack.
//!
//! Lowe's improvement: the pair (set of linearized operations, model state) fully determines
//! what can still happen, so every pair reached is remembered and never explored twice. This is
//! what turns the exponential worst case into something practical.
//!
//! Operations with unknown outcome (timed out) have no return entry: their response is at
//! +infinity, and they may also never take effect, so the search succeeds as soon as every
//! *returned* operation is linearized. Letting the plain search linearize them one at a time
//! whenever invoked would explore every subset of them (30 timed-out writes: 2^30 subsets), so
//! instead each search step linearizes one returned operation, optionally preceded by a *block*
//! of timed-out operations; only blocks that reach their end state with an inclusion-minimal set
//! of operations are tried (using fewer timed-out operations never hurts, they stay available),
//! and of several timed-out operations with equal inputs the earliest unused one is taken.
//!
//! Two cheap rules cut the search further without losing linearizations: a returned read-only
//! operation that fits the current state is linearized at once (see [`Position::take_reads`]),
//! and a path is abandoned as soon as some returned operation's result can no longer be
//! explained by any continuation (see [`Model::may_still_return`]).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::history::Operation;
use super::history::Outcome;
use super::model::Model;

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

/// The "no entry" link.
const NIL: usize = usize::MAX;

/// The entries of one key's history in time order, as a doubly linked list over indices:
/// `0..n` are call entries (index = operation), `n..2n` return entries (`n + operation`),
/// and `2n` is the list head.
struct Entries {
    next: Vec<usize>,
    prev: Vec<usize>,
    n: usize,
}

impl Entries {
    fn new<M: Model>(ops: &[&Operation<M>]) -> Self {
        let n = ops.len();
        // (time, returns-sort-after-calls, entry): at equal times calls come first, so equal
        // timestamps count as concurrent.
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
        for (i, op) in ops.iter().enumerate() {
            events.push((op.invoke_time, false, i));
            if let Some(t) = op.return_time() {
                events.push((t.max(op.invoke_time), true, n + i));
            }
        }
        events.sort_unstable();
        let head = 2 * n;
        let mut next = vec![NIL; 2 * n + 1];
        let mut prev = vec![NIL; 2 * n + 1];
        let mut last = head;
        for &(_, _, e) in &events {
            next[last] = e;
            prev[e] = last;
            last = e;
        }
        Entries { next, prev, n }
    }

    fn first(&self) -> usize {
        self.next[2 * self.n]
    }

    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    /// Undoes `unlink(e)`; valid only in reverse order of the unlinks.
    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        if n != NIL {
            self.prev[n] = e;
        }
    }
}

/// The set of linearized operations, one bit per operation.
#[derive(Clone, PartialEq, Eq)]
struct Bits(Box<[u64]>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)].into_boxed_slice())
    }
    fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

impl Bits {
    /// The bits set in both `self` and `mask` (`keep`) or in `self` but not `mask` (`!keep`).
    fn masked(&self, mask: &Bits, keep: bool) -> Bits {
        let words = self.0.iter().zip(mask.0.iter());
        Bits(
            words
                .map(|(w, m)| if keep { w & m } else { w & !m })
                .collect(),
        )
    }

    fn is_subset_of(&self, other: &Bits) -> bool {
        self.0.iter().zip(other.0.iter()).all(|(a, b)| a & !b == 0)
    }
}

/// Lowe's memo of explored configurations, extended with dominance over timed-out operations.
///
/// A configuration is (returned operations linearized, timed-out operations used, state).
/// Using fewer timed-out operations never hurts (the unused ones may take effect later or
/// never), so a configuration is not worth exploring if one with the same returned operations
/// and state, but a subset of its timed-out operations, was explored already. It was then
/// explored to exhaustion: returned operations only accumulate along a search path, so it
/// cannot be an ancestor. Without timed-out operations this is exactly Lowe's memo.
struct Memo<S> {
    explored: HashMap<(Bits, S), Vec<Bits>, MixBuild>,
    returned_mask: Bits,
}

impl<S: Clone + Eq + Hash> Memo<S> {
    /// Records the configuration; `false` if it (or one dominating it) was explored already.
    fn insert(&mut self, linearized: &Bits, state: &S) -> bool {
        let returned = linearized.masked(&self.returned_mask, true);
        let used = linearized.masked(&self.returned_mask, false);
        let sets = self.explored.entry((returned, state.clone())).or_default();
        if sets.iter().any(|explored| explored.is_subset_of(&used)) {
            return false;
        }
        sets.retain(|explored| !used.is_subset_of(explored));
        sets.push(used);
        true
    }
}

impl Hash for Bits {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for &w in self.0.iter() {
            state.write_u64(w);
        }
    }
}

/// A fast non-cryptographic hasher for the memo table (the keys are not attacker-controlled).
#[derive(Default)]
struct MixHasher(u64);

impl MixHasher {
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for MixHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }
    fn write_u8(&mut self, x: u8) {
        self.add(u64::from(x));
    }
    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }
    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }
    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }
    fn finish(&self) -> u64 {
        // Spread the entropy into the low bits as well, which pick the bucket.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }
}

type MixBuild = BuildHasherDefault<MixHasher>;

/// A sequence of timed-out operations that takes the state from a node's state to `state`.
#[derive(Clone)]
struct Block<S> {
    state: S,
    /// In application order.
    ops: Vec<usize>,
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
    /// See [`search`].
    twin: &'a [usize],
    /// Operations that set the state regardless of the previous one ([`Model::overwrite`]).
    blind: &'a [bool],
    /// Returned operations that [`Model::constrains`], in invocation order.
    constraining: &'a [usize],
    /// The operations that are not [monotone](Model::is_monotone), in invocation order, with
    /// the state they set if they are [blind writes](Model::overwrite).
    resets: &'a [(usize, Option<M::State>)],
    returned_ops: usize,
    max_steps: u64,
}

/// The mutable position of the search: what is linearized, in which order.
struct Position<M: Model> {
    entries: Entries,
    linearized: Bits,
    state: M::State,
    /// Every linearized operation, in linearization order.
    trail: Vec<usize>,
    /// How many returned operations are linearized.
    done: usize,
}

impl<M: Model> Position<M> {
    fn linearize(&mut self, ctx: &Context<'_, '_, M>, i: usize) {
        self.linearized.set(i);
        self.entries.unlink(i);
        if ctx.returned[i] {
            self.entries.unlink(self.entries.n + i);
            self.done += 1;
        }
        self.trail.push(i);
    }

    /// Undoes linearizations, most recent first, until `trail_len` remain.
    fn undo_to(&mut self, ctx: &Context<'_, '_, M>, trail_len: usize) {
        while self.trail.len() > trail_len {
            let Some(i) = self.trail.pop() else { break };
            if ctx.returned[i] {
                self.entries.relink(self.entries.n + i);
                self.done -= 1;
            }
            self.entries.relink(i);
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
    /// according to [`Model::may_still_return`], from the current state or from the state of
    /// a blind write that could still come before it; returns the first one that cannot. An
    /// operation is exempt while another non-monotone operation could still come before it.
    fn viable(&self, ctx: &Context<'_, '_, M>, steps: &mut u64) -> Result<(), usize> {
        // Non-monotone operations not linearized yet, in invocation order.
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
            // Could a blind write that may still precede the operation explain it instead?
            for (r, overwrite) in resets.clone() {
                if ctx.ops[*r].invoke_time > *time {
                    break;
                }
                match overwrite {
                    None => continue 'ops,
                    Some(state) if M::may_still_return(state, &op.input, output) => continue 'ops,
                    Some(_) => {}
                }
            }
            return Err(i);
        }
        Ok(())
    }
}

/// Searches one key's operations for a linearization, spending from `steps`.
///
/// A child of a node linearizes one returned operation, optionally preceded by a block of
/// timed-out operations (see [`closure`]) and followed by the reads that fit (see
/// [`Position::take_reads`]): every linearization can be rearranged into such steps once
/// timed-out operations after the last returned one are dropped, which they can be.
pub(super) fn search<'o, M: Model>(
    ops: &[&'o Operation<M>],
    max_steps: u64,
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

    // twin[i]: the previous timed-out operation with the same input. It was invoked no later
    // than i and also never returns, so whenever i could take effect it could too; using i
    // while its twin is unused would only explore a mirror image.
    let mut twin = vec![NIL; n];
    let mut last_with_input: HashMap<&M::Input, usize, MixBuild> = HashMap::default();
    for (i, op) in ops.iter().enumerate() {
        if !returned[i] {
            if let Some(t) = last_with_input.insert(&op.input, i) {
                twin[i] = t;
            }
        }
    }
    let resets: Vec<_> = (0..n)
        .filter(|&i| !M::is_monotone(&ops[i].input))
        .map(|i| (i, M::overwrite(&ops[i].input)))
        .collect();
    let blind: Vec<bool> = ops
        .iter()
        .map(|op| M::overwrite(&op.input).is_some())
        .collect();
    let constraining: Vec<usize> = (0..n)
        .filter(|&i| match &ops[i].outcome {
            Outcome::Returned { output, .. } => M::constrains(&ops[i].input, output),
            Outcome::Unknown => false,
        })
        .collect();
    let ctx = Context {
        ops: &ops,
        blind: &blind,
        constraining: &constraining,
        returned: &returned,
        read_only: &read_only,
        twin: &twin,
        resets: &resets,
        returned_ops: returned.iter().filter(|&&r| r).count(),
        max_steps,
    };

    let mut pos = Position::<M> {
        entries: Entries::new(&ops),
        linearized: Bits::new(n),
        state: M::init(),
        trail: Vec::new(),
        done: 0,
    };
    pos.take_reads(&ctx, steps);
    let mut returned_mask = Bits::new(n);
    for i in (0..n).filter(|&i| returned[i]) {
        returned_mask.set(i);
    }
    let mut memo = Memo {
        explored: HashMap::default(),
        returned_mask,
    };
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
        if *steps > max_steps {
            eprintln!("DEBUG nodes {} closures {} closure_blocks {} pops {} maxdepth {} done {} of {} trail {} memo {}", DBG[0].load(R), DBG[1].load(R), DBG[2].load(R), DBG[3].load(R), DBG[4].load(R), pos.done, ctx.returned_ops, pos.trail.len(), memo.explored.len());
            return Search::OutOfBudget;
        }
        let top = stack.len() - 1;
        let frame = &mut stack[top];
        let c = frame.cursor;
        if c < n {
            frame.cursor = pos.entries.next[c];
            let Outcome::Returned { output, .. } = &ops[c].outcome else {
                // Timed-out operations only take effect inside blocks.
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
                DBG[1].fetch_add(1, R);
                let Some(blocks) = closure(&ctx, &pos, steps) else {
                    eprintln!("DEBUG in closure nodes {} closures {} closure_blocks {} pops {} maxdepth {} done {} of {} trail {} memo {}", DBG[0].load(R), DBG[1].load(R), DBG[2].load(R), DBG[3].load(R), DBG[4].load(R), pos.done, ctx.returned_ops, pos.trail.len(), memo.explored.len());
                    return Search::OutOfBudget;
                };
                DBG[2].fetch_add(blocks.len() as u64, R);
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
        DBG[3].fetch_add(1, R);
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

/// The useful blocks of timed-out operations that could take effect next.
///
/// A block is only worth trying if no block made of a subset of its operations reaches the
/// same state: leaving more timed-out operations unused never hurts, since they may take
/// effect later or never. Blocks are built breadth-first, so the smaller ones come first and
/// dominate the larger ones. Identical timed-out operations are used earliest first. `None`
/// when the budget ran out.
fn closure<M: Model>(
    ctx: &Context<'_, '_, M>,
    pos: &Position<M>,
    steps: &mut u64,
) -> Option<Vec<Block<M::State>>> {
    let mut available = Vec::new();
    let mut e = pos.entries.first();
    while e < pos.entries.n {
        if !ctx.returned[e] {
            available.push(e);
        }
        e = pos.entries.next[e];
    }
    let mut out = Vec::new();
    if available.is_empty() {
        return Some(out);
    }
    let mut kept: HashMap<M::State, Vec<Vec<usize>>, MixBuild> = HashMap::default();
    kept.insert(pos.state.clone(), vec![Vec::new()]);
    let mut frontier = vec![Block {
        state: pos.state.clone(),
        ops: Vec::new(),
    }];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for block in &frontier {
            for &u in &available {
                if block.ops.contains(&u) {
                    continue;
                }
                let t = ctx.twin[u];
                if t != NIL && !pos.linearized.get(t) && !block.ops.contains(&t) {
                    continue;
                }
                if !block.ops.is_empty() && ctx.blind[u] {
                    // Overwrites whatever the block did: the block `[u]` alone does better.
                    continue;
                }
                *steps += 1;
                if *steps > ctx.max_steps {
                    return None;
                }
                let Some(state) = M::step_unobserved(&block.state, &ctx.ops[u].input) else {
                    continue;
                };
                let sets = kept.entry(state.clone()).or_default();
                if sets
                    .iter()
                    .any(|s| s.iter().all(|x| *x == u || block.ops.contains(x)))
                {
                    continue;
                }
                let mut ops = Vec::with_capacity(block.ops.len() + 1);
                ops.extend_from_slice(&block.ops);
                ops.push(u);
                sets.push(ops.clone());
                next.push(Block { state, ops });
            }
        }
        out.extend(next.iter().cloned());
        frontier = next;
    }
    Some(out)
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
    DeadEnd {
        linearized: pos.trail.iter().map(|&i| ctx.ops[i]).collect(),
        state: pos.state.clone(),
        blocked,
        doomed: doomed.iter().map(|&i| ctx.ops[i]).collect(),
        candidates,
    }
}

static DBG: [std::sync::atomic::AtomicU64; 5] = [const { std::sync::atomic::AtomicU64::new(0) }; 5];
const R: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;
