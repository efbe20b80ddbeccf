//! The shortest way to state a model: what each operation answers, and the state it leaves,
//! given the state the operations before it left.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;

use crate::linearizability::Model;

/// A sequential specification of one object, run as a function: [`Sequential`] makes it the
/// checker's [`Model`]. Write a [`Model`] yourself instead when the search needs its hints (a
/// history with many operations whose outcome is unknown on one key).
pub trait Spec {
    /// The object's state between operations.
    type State: Clone + Eq + Hash + fmt::Debug;
    /// What a client asks.
    type Input: Clone + Eq + Hash + fmt::Display + fmt::Debug;
    /// What it is told.
    type Output: Clone + Eq + fmt::Display + fmt::Debug;

    /// The state every key starts in.
    fn init() -> Self::State;

    /// What `input` answers from `state`, and the state it leaves.
    fn run(state: &Self::State, input: &Self::Input) -> (Self::State, Self::Output);

    /// Whether `input` never changes the state (a read): lets the checker skip what it cannot
    /// constrain. `false` is always correct.
    fn is_read_only(input: &Self::Input) -> bool {
        let _ = input;
        false
    }
}

/// The [`Model`] of a [`Spec`]: an operation told `output` fits a state exactly when running it
/// there answers `output`.
pub struct Sequential<S>(PhantomData<S>);

impl<S> Clone for Sequential<S> {
    fn clone(&self) -> Self {
        Sequential(PhantomData)
    }
}

impl<S> fmt::Debug for Sequential<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sequential")
    }
}

impl<S> PartialEq for Sequential<S> {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl<S> Eq for Sequential<S> {}

impl<S: Spec> Model for Sequential<S> {
    type State = S::State;
    type Input = S::Input;
    type Output = S::Output;

    fn init() -> S::State {
        S::init()
    }

    fn step(state: &S::State, input: &S::Input, output: &S::Output) -> Option<S::State> {
        let (next, answer) = S::run(state, input);
        (answer == *output).then_some(next)
    }

    fn step_unobserved(state: &S::State, input: &S::Input) -> Option<S::State> {
        let (next, _) = S::run(state, input);
        (next != *state).then_some(next)
    }

    fn is_read_only(input: &S::Input, _output: Option<&S::Output>) -> bool {
        S::is_read_only(input)
    }
}
