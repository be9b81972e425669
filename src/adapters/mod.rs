//! The adapters: the wheel where the Rust service stack expects a timer. Each owns one public
//! type family and builds only on the public futures (`Sleep`) and, for `DelayQueue`, on the
//! pure wheel; nothing below looks up here.
//!
//! - `delay_queue`: [`DelayQueue`](crate::DelayQueue), tokio-util's queue of expiring values,
//!   on a `wheel::Wheel` of its own and one `Sleep` on the timer (always built; its `Stream`
//!   behind the `stream` feature).
//! - `tower` (feature `tower`): a timeout layer in the shape of `tower::timeout`.
//! - `hyper` (feature `hyper`): `hyper::rt::Timer` on the wheel.

pub mod delay_queue;
#[cfg(feature = "hyper")]
pub mod hyper;
#[cfg(feature = "tower")]
pub mod tower;
