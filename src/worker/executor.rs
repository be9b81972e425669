//! Owns the executor's job ([`ExecutorJob`]); touches `shared`'s cells and stored tasks.

use crate::shared::cells::CellRef;
use crate::shared::{sealed, Stored};

/// An expired task and its state, for the executor. Run, it counts a panic of the task; dropped
/// unrun (the executor refuses it, panics or shuts down), it drops the task catching a panic of
/// its `Drop`, perhaps while the executor unwinds.
pub(super) struct ExecutorJob<J: Stored>(pub(super) Option<(J, CellRef)>);

impl<J: Stored> ExecutorJob<J> {
    pub(super) fn run(mut self) {
        let Some((task, state)) = self.0.take() else {
            return;
        };
        let (state, ran) = sealed::TaskStorage::run_stored(task, state);
        if !ran {
            state
                .chunk_timer()
                .counters()
                .user_code_panicked("a TimerTask (on the executor)");
        }
    }
}

impl<J: Stored> Drop for ExecutorJob<J> {
    /// A job dropped unrun is the executor's refusal: logged, as Netty logs a rejected submission.
    /// One dropped as the executor unwinds is not: its panic is logged once caught, and a logger
    /// (user code) that panicked here would abort the process.
    fn drop(&mut self) {
        if let Some((task, state)) = self.0.take() {
            // The task first: its drop is counted (and its panic caught) whatever the logger does.
            state.chunk_timer().counters().drop_task(task);
            if !std::thread::panicking() {
                crate::shared::log_caught(
                    log::Level::Warn,
                    format_args!(
                        "an expired task was dropped by the executor without running; its \
                         timeout stays expired"
                    ),
                );
            }
        }
    }
}
