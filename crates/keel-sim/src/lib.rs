//! keel-sim: the deterministic cluster simulator and the checkers it runs.

pub mod linearizability;
