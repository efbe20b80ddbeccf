//! keel-session: a client's session with a node of keel's Redis server, without I/O.
//!
//! - [`connection`]: one client connection's protocol state (HELLO, CLIENT, CONFIG, COMMAND,
//!   INFO, MONITOR, MULTI/EXEC), handing writes, reads and admin commands back to the caller, and
//!   its [`connection::pipeline`]: which requests are proposed together and in which order the
//!   replies leave.
//! - [`blocked`]: the clients of a node waiting in a blocking pop, by key, and whom a fill wakes
//!   (the attempt deadlines too).
//! - [`forwarding`]: when a follower retries a write it forwarded to the leader, under which
//!   request id, and when it gives up (time as an input, no I/O).
//!
//! The tokio server (`keel-server`) and the deterministic simulator (`keel-sim`) both drive this
//! code: what a connection decides is decided here once.

pub mod blocked;
pub mod connection;
pub mod forwarding;
pub mod pubsub;

pub use connection::{ClientConnection, Dispatch, NodeInfo, NodeReport, Transaction};
