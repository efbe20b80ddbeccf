//! Turns the simulator's client history into the checker's and runs it.

use crate::history::{History, OpKind, OpResult};
use crate::invariants::Violation;
use crate::linearizability::{
    History as CheckHistory, Operation, Register, RegisterOp, RegisterOutput,
};

/// Stands for every value that no client ever observed.
const UNOBSERVED: u64 = u64::MAX;

/// Converts the history. Values that no read or swap returned and no compare-and-set expected are
/// all replaced by one sentinel: the register model only compares values for equality with
/// observed ones, so such values are indistinguishable, and collapsing them lets the search treat
/// the many timed-out writes of a faulty run as interchangeable instead of exploring each subset.
pub fn to_checker_history(history: &History) -> CheckHistory<Register> {
    let mut observed = std::collections::HashSet::new();
    for op in &history.ops {
        if let Some(OpResult::Read(Some(v)) | OpResult::Swapped(Some(v))) = op.result {
            observed.insert(v);
        }
        if let OpKind::Cas {
            expected: Some(v), ..
        } = op.kind
        {
            observed.insert(v);
        }
    }
    let canon = |v: u64| if observed.contains(&v) { v } else { UNOBSERVED };
    let mut out = CheckHistory::new();
    for op in &history.ops {
        let input = match op.kind {
            OpKind::Read => RegisterOp::Read,
            OpKind::Write(v) => RegisterOp::Write(Some(canon(v))),
            OpKind::Cas { expected, new } => RegisterOp::Cas {
                expected,
                new: Some(canon(new)),
            },
            OpKind::Swap(v) => RegisterOp::Swap(Some(canon(v))),
        };
        let key = op.key.to_string();
        let output = match op.result {
            Some(OpResult::Read(v)) => Some(RegisterOutput::Read(v)),
            Some(OpResult::Written) => Some(RegisterOutput::Written),
            Some(OpResult::CasSwapped) => Some(RegisterOutput::CasOk),
            Some(OpResult::CasFailed) => Some(RegisterOutput::CasFailed),
            Some(OpResult::Swapped(v)) => Some(RegisterOutput::Swapped(v)),
            Some(OpResult::Unknown) | None => None,
        };
        let operation = match (output, op.complete_time) {
            (Some(output), Some(t)) => {
                Operation::returned(op.client, key, input, op.invoke_time, t, output)
            }
            _ => Operation::unknown(op.client, key, input, op.invoke_time),
        };
        out.push(operation)
            .expect("simulator histories are well formed");
    }
    out
}

pub fn check_history(history: &History) -> Result<(), Violation> {
    crate::invariants::linearizable(&to_checker_history(history))
}
