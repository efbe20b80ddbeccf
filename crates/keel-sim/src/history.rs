//! The record of what simulated clients asked and were told, in simulated time, for the
//! linearizability check.

/// A register's key and value, as the simulated clients use them.
pub type Key = u64;
pub type Value = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write(Value),
    Cas {
        expected: Option<Value>,
        new: Value,
    },
    /// Writes the value and returns the one it replaced, in one step: the transaction `MULTI`,
    /// `GET k`, `SET k v`, `EXEC`.
    Swap(Value),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// A read's value.
    Read(Option<Value>),
    Written,
    CasSwapped,
    CasFailed,
    /// A swap's replaced value.
    Swapped(Option<Value>),
    /// Timed out: a write may or may not have taken effect; a read tells nothing.
    Unknown,
}

#[derive(Clone, Debug)]
pub struct ClientOp {
    pub client: u64,
    pub key: Key,
    pub kind: OpKind,
    pub invoke_time: u64,
    /// `None` while pending.
    pub complete_time: Option<u64>,
    pub result: Option<OpResult>,
}

#[derive(Clone, Debug, Default)]
pub struct History {
    pub ops: Vec<ClientOp>,
}

impl History {
    pub fn invoke(&mut self, client: u64, key: Key, kind: OpKind, time: u64) -> usize {
        self.ops.push(ClientOp {
            client,
            key,
            kind,
            invoke_time: time,
            complete_time: None,
            result: None,
        });
        self.ops.len() - 1
    }

    /// Operation `op` is, from `time` on, a `kind`: a watched transaction is invoked when its
    /// client starts (`WATCH`, `GET`), but the compare-and-set it is, and the value it expects,
    /// are known only when its `EXEC` leaves, which is when it can first take effect.
    pub fn reinvoke(&mut self, op: usize, kind: OpKind, time: u64) {
        let entry = &mut self.ops[op];
        assert!(entry.result.is_none(), "operation completed already");
        entry.kind = kind;
        entry.invoke_time = time;
    }

    pub fn complete(&mut self, op: usize, result: OpResult, time: u64) {
        let entry = &mut self.ops[op];
        assert!(entry.result.is_none(), "operation completed twice");
        entry.complete_time = Some(time);
        entry.result = Some(result);
    }
}
