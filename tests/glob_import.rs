//! A glob import of the crate leaves the user's own `tower` and `hyper` imports alone: the
//! crate exports no module named after another crate (its adapters' types are flat at the
//! root), so `use tower::...` and `use hyper::...` resolve to those crates, not ambiguously.
//! That this file compiles is most of the test.
#![cfg(all(feature = "hyper", feature = "tower"))]

use hashed_timer_wheel::*;
use hyper::rt::Timer as _;
use hyper::{Request, Response};
use std::convert::Infallible;
use std::time::Duration;
use tower::timeout::error::Elapsed;
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[test]
fn a_glob_import_leaves_tower_and_hyper_to_their_crates() {
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    let slow = ServiceBuilder::new()
        .layer(TimeoutLayer::new(timer.handle(), Duration::from_millis(2)))
        .service(service_fn(|_: Request<()>| {
            std::future::pending::<Result<Response<()>, Infallible>>()
        }));
    let error = futures::executor::block_on(slow.oneshot(Request::new(()))).unwrap_err();
    assert!(error.is::<Elapsed>(), "{error}");

    let hyper_timer = HyperTimer::new(timer.handle());
    futures::executor::block_on(hyper_timer.sleep(Duration::from_millis(2)));
}
