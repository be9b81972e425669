//! `KeepAlive`: a handle that keeps the timer running, for the adapters and their futures.

use crate::engine::TimerHandle;
use crate::sync::Arc;
use crate::TimerError;

/// A [`TimerHandle`] counted among the timer's users (as the owner is). Its clones share one
/// count: a clone moves one count that the runtime's threads share, not the timer's two.
#[derive(Clone)]
pub(crate) struct KeepAlive(Arc<Keeper>);

/// The handle, counted once for every clone of the `KeepAlive` that made it.
struct Keeper(TimerHandle);

impl KeepAlive {
    /// Counts one more user; [`TimerError::Stopped`] once the timer is stopped.
    pub(crate) fn new(handle: TimerHandle) -> Result<KeepAlive, TimerError> {
        handle.0.enter_user()?;
        Ok(KeepAlive(Arc::new(Keeper(handle))))
    }
}

impl std::ops::Deref for KeepAlive {
    type Target = TimerHandle;

    fn deref(&self) -> &TimerHandle {
        &self.0 .0
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0 .0.release();
    }
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0 .0.fmt(f)
    }
}
