//! Sequential specifications the checker linearizes against.

use std::fmt;
use std::hash::Hash;

/// A deterministic sequential specification of one object (one key).
///
/// The search needs only [`Model::step`] and [`Model::step_unobserved`]: whether an operation
/// with a given observed output could have been applied to a state, and what the state is
/// afterwards. Keeping that core contract small is what lets one search serve both the
/// simulator's register and the string-append histories from Jepsen. The other methods are
/// optional hints that let the search prune; their defaults disable the pruning and are always
/// correct, while a wrong hint can make the checker wrong, so each states exactly what it
/// promises.
///
/// States are memoised together with the set of linearized operations, so they must be cheap
/// to clone and hash; inputs of timed-out operations are compared for equality to collapse
/// interchangeable ones.
///
/// Implementors are marker types; the supertraits only let `#[derive]` work on the generic
/// history and verdict types.
pub trait Model: Clone + fmt::Debug + PartialEq + Eq {
    /// The object's state between operations.
    type State: Clone + Eq + Hash + fmt::Debug;
    /// What a client asked for.
    type Input: Clone + Eq + Hash + fmt::Display + fmt::Debug;
    /// What a client was told when its operation completed.
    type Output: Clone + Eq + fmt::Display + fmt::Debug;

    /// The state every key starts in.
    fn init() -> Self::State;

    /// The state after applying `input` to `state`, provided the operation could have returned
    /// `output` from `state`; `None` when that output is impossible from that state.
    fn step(state: &Self::State, input: &Self::Input, output: &Self::Output)
        -> Option<Self::State>;

    /// The state after applying `input` to `state` when nobody saw the result (the client timed
    /// out). Return `None` when taking effect would leave the state unchanged: such an operation
    /// is indistinguishable from one that never took effect, which the checker always allows, so
    /// exploring it would only waste search time.
    fn step_unobserved(state: &Self::State, input: &Self::Input) -> Option<Self::State>;

    /// Whether the operation leaves the state unchanged in every state from which it could
    /// have produced `output` (`None`: for every output, i.e. whatever happened).
    ///
    /// The checker uses this twice: timed-out read-only operations constrain nothing and are
    /// dropped, and a returned read-only operation that fits the current state is linearized
    /// at once without branching (any linearization can be rearranged to do so), which keeps
    /// concurrent reads from multiplying the search space. Answering `false` is always safe.
    fn is_read_only(input: &Self::Input, output: Option<&Self::Output>) -> bool;

    /// What the operation does to the state when it takes effect, if it is one of the simple
    /// shapes of [`Effect`]. Must agree with [`Model::step`] for every output and with
    /// [`Model::step_unobserved`]. Lets the search index timed-out operations by the states
    /// they lead to instead of trying each of them everywhere. The default is
    /// [`Effect::Other`].
    fn effect(input: &Self::Input) -> Effect<Self::State> {
        let _ = input;
        Effect::Other
    }

    /// The only state from which `input` could have returned `output`, if there is exactly
    /// one (a read returning `v`: `v`). Lets the search look for timed-out operations leading
    /// to that state rather than trying all of them. The default (`None`) is always correct.
    fn required_state(input: &Self::Input, output: &Self::Output) -> Option<Self::State> {
        let _ = (input, output);
        None
    }

    /// A cheap necessary condition for an operation that returned `output` to be linearizable
    /// at some point after the state has become `state`, if in between only
    /// [monotone](Model::is_monotone) operations take effect (after the last operation with a
    /// [`Effect::Set`] or [`Effect::Swap`] effect, if any, whose resulting state the checker
    /// then passes as `state`).
    ///
    /// The checker prunes a search path as soon as some not yet linearized operation fails this
    /// test, instead of discovering the dead end only when that operation's return is reached.
    /// For the append model this cuts the orderings of concurrent appends that no read agrees
    /// with. The default (`true`) disables the pruning and is always correct; see also
    /// [`Model::constrains`].
    fn may_still_return(state: &Self::State, input: &Self::Input, output: &Self::Output) -> bool {
        let _ = (state, input, output);
        true
    }

    /// Whether [`Model::may_still_return`] can ever be `false` for this operation and output;
    /// only such operations are checked. The default (`false`) disables the pruning.
    fn constrains(input: &Self::Input, output: &Self::Output) -> bool {
        let _ = (input, output);
        false
    }

    /// Whether applying `input` keeps [`Model::may_still_return`] false for every operation it
    /// was false for: the operation only moves the state "forward". The default (`false`) is
    /// always correct.
    fn is_monotone(input: &Self::Input) -> bool {
        let _ = input;
        false
    }
}

/// The shape of an operation's effect on the state, for [`Model::effect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect<S> {
    /// Never changes the state.
    Keep,
    /// Leaves this state whatever the state was before (a blind write). A returned operation
    /// with this effect may still have needed a particular state to produce its output (a swap
    /// that returned the old value): [`Model::required_state`] says which.
    Set(S),
    /// Changes the state to `to` if it was `from`, and otherwise leaves it unchanged (a
    /// compare-and-set).
    Swap {
        /// The state it applies to.
        from: S,
        /// The state it leaves.
        to: S,
    },
    /// Anything else.
    Other,
}

/// The value of a register: `None` when the key is absent.
pub type Value = Option<u64>;

/// A register per key holding an optional `u64`: the model of the simulator's key-value
/// state machine and of the Jepsen etcd histories.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Register;

/// An operation on a [`Register`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegisterOp {
    /// Return the current value.
    Read,
    /// Replace the value (`None` deletes the key).
    Write(Value),
    /// Replace the value with `new` if and only if it currently equals `expected`.
    Cas {
        /// The value the register must hold for the swap to happen.
        expected: Value,
        /// The value stored when the swap happens.
        new: Value,
    },
    /// Replace the value and return the one replaced, in one step (a transaction that reads the
    /// key and then writes it).
    Swap(Value),
}

/// The result a client observed for a [`RegisterOp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegisterOutput {
    /// A read returned this value.
    Read(Value),
    /// A write was acknowledged.
    Written,
    /// A compare-and-set swapped.
    CasOk,
    /// A compare-and-set was rejected because the register did not hold `expected`; it is a
    /// read constraining the state, not a no-op.
    CasFailed,
    /// A swap replaced this value.
    Swapped(Value),
}

impl Model for Register {
    type State = Value;
    type Input = RegisterOp;
    type Output = RegisterOutput;

    fn init() -> Value {
        None
    }

    fn step(state: &Value, input: &RegisterOp, output: &RegisterOutput) -> Option<Value> {
        match (input, output) {
            (RegisterOp::Read, RegisterOutput::Read(seen)) => (seen == state).then_some(*state),
            (RegisterOp::Write(v), RegisterOutput::Written) => Some(*v),
            (RegisterOp::Cas { expected, new }, RegisterOutput::CasOk) => {
                (expected == state).then_some(*new)
            }
            (RegisterOp::Cas { expected, .. }, RegisterOutput::CasFailed) => {
                (expected != state).then_some(*state)
            }
            (RegisterOp::Swap(new), RegisterOutput::Swapped(old)) => (old == state).then_some(*new),
            // A swap known to have taken effect whose old value nobody saw (its replies were
            // lost): a write.
            (RegisterOp::Swap(new), RegisterOutput::Written) => Some(*new),
            // An output of the wrong kind can never be explained.
            _ => None,
        }
    }

    fn step_unobserved(state: &Value, input: &RegisterOp) -> Option<Value> {
        match input {
            RegisterOp::Read => None,
            RegisterOp::Write(v) | RegisterOp::Swap(v) => (v != state).then_some(*v),
            // A compare-and-set that does not swap leaves no trace.
            RegisterOp::Cas { expected, new } => {
                (expected == state && new != state).then_some(*new)
            }
        }
    }

    fn effect(input: &RegisterOp) -> Effect<Value> {
        match *input {
            RegisterOp::Read => Effect::Keep,
            // A swap leaves its value whatever it replaced; what it returned needs a state
            // (`required_state`).
            RegisterOp::Write(v) | RegisterOp::Swap(v) => Effect::Set(v),
            RegisterOp::Cas { expected, new } => Effect::Swap {
                from: expected,
                to: new,
            },
        }
    }

    fn required_state(input: &RegisterOp, output: &RegisterOutput) -> Option<Value> {
        match (input, output) {
            (RegisterOp::Read, RegisterOutput::Read(v)) => Some(*v),
            (RegisterOp::Cas { expected, .. }, RegisterOutput::CasOk) => Some(*expected),
            (RegisterOp::Swap(_), RegisterOutput::Swapped(old)) => Some(*old),
            _ => None,
        }
    }

    fn is_read_only(input: &RegisterOp, output: Option<&RegisterOutput>) -> bool {
        match input {
            RegisterOp::Read => true,
            RegisterOp::Write(_) | RegisterOp::Swap(_) => false,
            RegisterOp::Cas { expected, new } => {
                expected == new || output == Some(&RegisterOutput::CasFailed)
            }
        }
    }
}

/// Displays a register value the way Jepsen logs print it (`nil` when absent).
struct ShowValue(Value);

impl fmt::Display for ShowValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => f.write_str("nil"),
        }
    }
}

impl fmt::Display for RegisterOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterOp::Read => f.write_str("read"),
            RegisterOp::Write(v) => write!(f, "write {}", ShowValue(*v)),
            RegisterOp::Cas { expected, new } => {
                write!(f, "cas {} -> {}", ShowValue(*expected), ShowValue(*new))
            }
            RegisterOp::Swap(v) => write!(f, "swap {}", ShowValue(*v)),
        }
    }
}

impl fmt::Display for RegisterOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterOutput::Read(v) => write!(f, "{}", ShowValue(*v)),
            RegisterOutput::Written => f.write_str("ok"),
            RegisterOutput::CasOk => f.write_str("swapped"),
            RegisterOutput::CasFailed => f.write_str("not swapped"),
            RegisterOutput::Swapped(v) => write!(f, "replaced {}", ShowValue(*v)),
        }
    }
}

/// A string per key (missing = empty) with get, put and append: the model of the Jepsen
/// key-value histories.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Append;

/// An operation on an [`Append`] key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AppendOp {
    /// Return the current string.
    Get,
    /// Replace the string.
    Put(String),
    /// Concatenate to the string.
    Append(String),
}

/// The result a client observed for an [`AppendOp`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AppendOutput {
    /// A get returned this string.
    Get(String),
    /// A put or append was acknowledged.
    Ok,
}

impl Model for Append {
    type State = String;
    type Input = AppendOp;
    type Output = AppendOutput;

    fn init() -> String {
        String::new()
    }

    fn step(state: &String, input: &AppendOp, output: &AppendOutput) -> Option<String> {
        match (input, output) {
            (AppendOp::Get, AppendOutput::Get(seen)) => (seen == state).then(|| state.clone()),
            (AppendOp::Put(_) | AppendOp::Append(_), AppendOutput::Ok) => {
                Self::step_unobserved(state, input).or_else(|| Some(state.clone()))
            }
            _ => None,
        }
    }

    fn step_unobserved(state: &String, input: &AppendOp) -> Option<String> {
        match input {
            AppendOp::Get => None,
            AppendOp::Put(s) => (s != state).then(|| s.clone()),
            AppendOp::Append(s) if s.is_empty() => None,
            AppendOp::Append(s) => Some(format!("{state}{s}")),
        }
    }

    fn is_read_only(input: &AppendOp, _output: Option<&AppendOutput>) -> bool {
        match input {
            AppendOp::Get => true,
            AppendOp::Put(_) => false,
            AppendOp::Append(s) => s.is_empty(),
        }
    }

    /// Appends only extend the string, so a get can only still return a string that extends
    /// the current one.
    fn may_still_return(state: &String, input: &AppendOp, output: &AppendOutput) -> bool {
        match (input, output) {
            (AppendOp::Get, AppendOutput::Get(seen)) => seen.starts_with(state.as_str()),
            _ => true,
        }
    }

    fn constrains(input: &AppendOp, output: &AppendOutput) -> bool {
        matches!((input, output), (AppendOp::Get, AppendOutput::Get(_)))
    }

    fn is_monotone(input: &AppendOp) -> bool {
        !matches!(input, AppendOp::Put(_))
    }

    fn effect(input: &AppendOp) -> Effect<String> {
        match input {
            AppendOp::Get => Effect::Keep,
            AppendOp::Put(s) => Effect::Set(s.clone()),
            AppendOp::Append(s) if s.is_empty() => Effect::Keep,
            AppendOp::Append(_) => Effect::Other,
        }
    }

    fn required_state(input: &AppendOp, output: &AppendOutput) -> Option<String> {
        match (input, output) {
            (AppendOp::Get, AppendOutput::Get(seen)) => Some(seen.clone()),
            _ => None,
        }
    }
}

impl fmt::Display for AppendOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppendOp::Get => f.write_str("get"),
            AppendOp::Put(s) => write!(f, "put {s:?}"),
            AppendOp::Append(s) => write!(f, "append {s:?}"),
        }
    }
}

impl fmt::Display for AppendOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppendOutput::Get(s) => write!(f, "{s:?}"),
            AppendOutput::Ok => f.write_str("ok"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_steps() {
        let w = RegisterOp::Write(Some(3));
        assert_eq!(
            Register::step(&None, &w, &RegisterOutput::Written),
            Some(Some(3))
        );
        let r = RegisterOp::Read;
        assert_eq!(
            Register::step(&Some(3), &r, &RegisterOutput::Read(Some(3))),
            Some(Some(3))
        );
        assert_eq!(
            Register::step(&Some(3), &r, &RegisterOutput::Read(None)),
            None
        );
        let cas = RegisterOp::Cas {
            expected: Some(3),
            new: Some(4),
        };
        assert_eq!(
            Register::step(&Some(3), &cas, &RegisterOutput::CasOk),
            Some(Some(4))
        );
        assert_eq!(Register::step(&Some(2), &cas, &RegisterOutput::CasOk), None);
        assert_eq!(
            Register::step(&Some(2), &cas, &RegisterOutput::CasFailed),
            Some(Some(2))
        );
        assert_eq!(
            Register::step(&Some(3), &cas, &RegisterOutput::CasFailed),
            None
        );
        assert_eq!(Register::step(&Some(3), &r, &RegisterOutput::CasOk), None);
        assert_eq!(Register::step_unobserved(&Some(2), &cas), None);
        assert_eq!(Register::step_unobserved(&Some(3), &cas), Some(Some(4)));
        assert_eq!(Register::step_unobserved(&Some(3), &r), None);
        let swap = RegisterOp::Swap(Some(5));
        assert_eq!(
            Register::step(&Some(3), &swap, &RegisterOutput::Swapped(Some(3))),
            Some(Some(5))
        );
        assert_eq!(
            Register::step(&Some(3), &swap, &RegisterOutput::Swapped(None)),
            None
        );
        assert_eq!(
            Register::step(&Some(3), &swap, &RegisterOutput::Written),
            Some(Some(5))
        );
        assert_eq!(
            Register::required_state(&swap, &RegisterOutput::Swapped(None)),
            Some(None)
        );
        assert_eq!(Register::step_unobserved(&Some(3), &swap), Some(Some(5)));
        assert_eq!(Register::step_unobserved(&Some(5), &swap), None);
    }

    #[test]
    fn append_steps() {
        let a = AppendOp::Append("x".into());
        assert_eq!(
            Append::step(&"ab".into(), &a, &AppendOutput::Ok),
            Some("abx".into())
        );
        let p = AppendOp::Put("ab".into());
        assert_eq!(
            Append::step(&"ab".into(), &p, &AppendOutput::Ok),
            Some("ab".into())
        );
        let g = AppendOp::Get;
        assert_eq!(
            Append::step(&"ab".into(), &g, &AppendOutput::Get("ab".into())),
            Some("ab".into())
        );
        assert_eq!(
            Append::step(&"ab".into(), &g, &AppendOutput::Get("a".into())),
            None
        );
        assert_eq!(Append::step(&"ab".into(), &g, &AppendOutput::Ok), None);
    }
}
