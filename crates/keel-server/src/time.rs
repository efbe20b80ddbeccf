//! The leader's tick entries: the tokio shell around `keel_redis::expiry::TimeKeeper`, which decides.

use std::time::Duration;

use keel::ClientError;

use super::{wall_clock_ms, ServerContext};
use keel_redis::expiry::{TimeKeeper, TICK_KEYS_MAX};

/// Runs for as long as the node serves. On the leader, asks the time keeper twice per tick
/// interval, or at the earliest deadline if sooner, and proposes what it decides; on any other
/// node the read that feeds it is refused (not the leader) and nothing is proposed.
pub(super) async fn keep_time(ctx: &ServerContext) {
    let mut keeper = TimeKeeper::new(ctx.time_tick_ms);
    let mut wait_ms = keeper.poll_interval_ms();
    loop {
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        wait_ms = keeper.poll_interval_ms();
        let now_ms = wall_clock_ms();
        // Linearizable: only a leader whose term has committed answers, so a deposed leader
        // does not propose ticks (which would be refused anyway).
        let seen = ctx
            .handle
            .read(move |sm| {
                let state = sm.state();
                (
                    state.log_time_ms(),
                    state.wants_ticks(),
                    state.earliest_deadline(),
                    state.keys_due(now_ms, TICK_KEYS_MAX),
                )
            })
            .await;
        let (log_time_ms, wants_ticks, earliest_deadline, due) = match seen {
            Ok(seen) => seen,
            Err(ClientError::NotLeader { .. }) | Err(ClientError::Shutdown) => continue,
            Err(e) => {
                tracing::debug!("tick: the leader's read failed: {e}");
                continue;
            }
        };
        let now_ms = wall_clock_ms();
        wait_ms = keeper.wait_ms(now_ms, earliest_deadline);
        let Some(tick) = keeper.next_tick(now_ms, log_time_ms, wants_ticks, due) else {
            continue;
        };
        if let Err(e) = ctx.handle.propose(tick.encode()).await {
            tracing::debug!("tick: not committed: {e}");
        }
        keeper.tick_done();
    }
}
