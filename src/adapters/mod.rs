//! The adapters: the wheel where the Rust service stack expects a timer. Each owns one public
//! type family and builds only on the public futures (`Sleep`) and, for `DelayQueue`, on the
//! pure wheel; nothing below looks up here.
//!
//! - `delay_queue`: [`DelayQueue`](crate::DelayQueue), tokio-util's queue of expiring values,
//!   on a `wheel::Wheel` of its own and one `Sleep` on the timer (always built; its `Stream`
//!   behind the `stream` feature).
//! - `tower` (feature `tower`): a timeout layer in the shape of `tower::timeout`.
//! - `hyper` (feature `hyper`): `hyper::rt::Timer` on the wheel.

// `delay_queue` is public (its `Key` and `Expired` live there); `hyper` and `tower` are not:
// a public module named after a crate would shadow that crate in a user's
// `use hashed_timer_wheel::*;`, so their types are exported flat from the crate root.
pub mod delay_queue;
#[cfg(feature = "hyper")]
pub(crate) mod hyper;
#[cfg(feature = "tower")]
pub(crate) mod tower;

use crate::sync::{process::AtomicBool, Ordering};
use crate::TimerHandle;

/// An adapter's error for a stopped timer, logged once per process and adapter. A handle does
/// not keep its timer alive, so an adapter built from the handle of an owner that was then
/// dropped (at the end of the function that set the server up, say) gets nothing but refusals:
/// without this log, hyper would close every connection as a timeout, or a tower stack fail
/// every call, with nothing said. Once: the mistake is one, and every connection repeats it.
pub(crate) struct StoppedTimer {
    adapter: &'static str,
    /// What the adapter does for its user while the timer is stopped.
    effect: &'static str,
    logged: AtomicBool,
}

impl StoppedTimer {
    pub(crate) const fn new(adapter: &'static str, effect: &'static str) -> StoppedTimer {
        StoppedTimer {
            adapter,
            effect,
            logged: AtomicBool::new(false),
        }
    }

    /// Logs the error, the first time, if `timer` is stopped: called where the adapter is
    /// built and where it asks the timer for a sleep or a deadline, which a stopped timer
    /// refuses. One load of the timer's state when it runs.
    #[inline]
    pub(crate) fn check(&self, timer: &TimerHandle) {
        if timer.is_stopped() {
            self.log();
        }
    }

    #[cold]
    fn log(&self) {
        // Relaxed: the flag orders nothing; at worst two threads both log.
        if !self.logged.swap(true, Ordering::Relaxed) {
            log::error!(
                "{} on a stopped timer: {}. The likely cause: the timer's owner, the \
                 HashedWheelTimer, was dropped (a TimerHandle does not keep it alive); keep it \
                 alive for as long as the {} is used, and stop it after the server. \
                 Logged once per process.",
                self.adapter,
                self.effect,
                self.adapter,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The adapters sit on top: no module outside `adapters/` imports them (`lib.rs` only
    /// declares and re-exports them). Read from the source tree, not from a hand-kept list.
    #[test]
    fn nothing_below_imports_the_adapters() {
        fn visit(dir: &Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    if path.file_name().is_some_and(|n| n != "adapters") {
                        visit(&path, found);
                    }
                } else if path.extension().is_some_and(|e| e == "rs")
                    && path.file_name().is_some_and(|n| n != "lib.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let names = ["DelayQueue", "HyperTimer", "TimeoutLayer"];
                    let imports = text.lines().any(|line| {
                        line.contains("adapters::")
                            || (line.contains("crate::") && names.iter().any(|n| line.contains(n)))
                    });
                    if imports {
                        found.push(path.display().to_string());
                    }
                }
            }
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = vec![];
        visit(&src, &mut found);
        assert!(
            found.is_empty(),
            "modules below the adapters name them: {found:?}"
        );
    }
}
