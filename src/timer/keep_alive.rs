//! `KeepAlive`: a handle that keeps the timer running, for the adapters and their futures.

use crate::engine::TimerHandle;
use crate::sync::Ordering;
use crate::TimerError;

/// A [`TimerHandle`] counted among the timer's users (as the owner is).
pub(crate) struct KeepAlive {
    handle: TimerHandle,
}

impl KeepAlive {
    /// Counts one more user; [`TimerError::Stopped`] once the timer is stopped.
    pub(crate) fn new(handle: TimerHandle) -> Result<KeepAlive, TimerError> {
        handle.0.enter_user()?;
        Ok(KeepAlive { handle })
    }
}

impl std::ops::Deref for KeepAlive {
    type Target = TimerHandle;

    fn deref(&self) -> &TimerHandle {
        &self.handle
    }
}

impl Clone for KeepAlive {
    fn clone(&self) -> Self {
        // Relaxed: this user holds the count above zero.
        self.handle.0.users.fetch_add(1, Ordering::Relaxed);
        KeepAlive {
            handle: self.handle.clone(),
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.handle.0.release();
    }
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.handle.fmt(f)
    }
}
