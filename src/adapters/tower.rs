//! A tower 0.5 timeout layer on the wheel, in the shape of `tower::timeout`: [`TimeoutLayer`],
//! [`TimeoutService`] and [`TimeoutResponseFuture`], each call a [`Deadline`].

use super::keep_alive;
use crate::timer::KeepAlive;
use crate::{Deadline, DeadlineError, TimerError, TimerHandle};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::timeout::error::Elapsed;
use tower::{BoxError, Layer, Service};

/// `tower::timeout::TimeoutLayer` on the wheel: each request gets at most `limit` to produce
/// its response ([`TimeoutService`]). Limits round up to the end of a tick: build the timer
/// with a 1 ms tick, as below, not the default 100 ms.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, TimeoutLayer};
/// use std::time::Duration;
/// use tower::timeout::error::Elapsed;
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
/// let slow = ServiceBuilder::new()
///     .layer(TimeoutLayer::new(timer.handle(), Duration::from_millis(5)))
///     .service(service_fn(|_: ()| std::future::pending::<Result<(), std::convert::Infallible>>()));
/// let error = futures::executor::block_on(slow.oneshot(())).unwrap_err();
/// assert!(error.is::<Elapsed>());
/// ```
///
/// # The timer runs while a `TimeoutLayer` exists
/// Each clone, each [`TimeoutService`] it makes, and each of their response futures keeps its
/// timer running, though the owner ([`HashedWheelTimer`]) is dropped.
/// [`stop()`](crate::TimerHandle::stop) stops it for everyone (see [`TimeoutService`]).
///
/// [`HashedWheelTimer`]: crate::HashedWheelTimer
#[derive(Clone, Debug)]
pub struct TimeoutLayer {
    timer: KeepAlive,
    limit: Duration,
}

impl TimeoutLayer {
    /// A layer that gives each request `limit`, measured by `timer`, which it keeps running.
    ///
    /// # Panics
    /// If the timer is stopped (its owner dropped with no adapter left on it, or `stop()`).
    #[track_caller]
    pub fn new(timer: TimerHandle, limit: Duration) -> Self {
        TimeoutLayer {
            timer: keep_alive("TimeoutLayer", timer),
            limit,
        }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = TimeoutService<S>;

    fn layer(&self, inner: S) -> TimeoutService<S> {
        TimeoutService {
            inner,
            timer: self.timer.clone(),
            limit: self.limit,
        }
    }
}

/// A service whose responses fail with tower's own
/// [`Elapsed`](https://docs.rs/tower/0.5/tower/timeout/error/struct.Elapsed.html) when they
/// take longer than the limit, counted from `call` (`tower::timeout::Timeout`, on the wheel).
/// `poll_ready` and inner errors pass through, boxed. Once the timer is stopped, `poll_ready`
/// fails with [`TimerError::Stopped`], boxed, and so does a response in flight unless it is
/// ready when polled. At the timer's pending limit, a response pending at its first poll fails
/// with [`TimerError::TooManyPending`], boxed, as a [`Deadline`] does.
///
/// ```
/// use hashed_timer_wheel::{HashedWheelTimer, TimeoutService};
/// use std::time::Duration;
/// use tower::{service_fn, ServiceExt};
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
/// let echo = service_fn(|x: u32| async move { Ok::<_, std::convert::Infallible>(x) });
/// let service = TimeoutService::new(echo, timer.handle(), Duration::from_secs(1));
/// assert_eq!(futures::executor::block_on(service.oneshot(7)).unwrap(), 7);
/// ```
#[derive(Clone, Debug)]
pub struct TimeoutService<S> {
    inner: S,
    timer: KeepAlive,
    limit: Duration,
}

impl<S> TimeoutService<S> {
    /// `inner` with a limit of `limit` per call, measured by `timer`, which it keeps running.
    ///
    /// # Panics
    /// If the timer is stopped (its owner dropped with no adapter left on it, or `stop()`).
    #[track_caller]
    pub fn new(inner: S, timer: TimerHandle, limit: Duration) -> Self {
        TimeoutService {
            inner,
            timer: keep_alive("TimeoutService", timer),
            limit,
        }
    }

    /// The limit each call gets, counted from `call`.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// The inner service, by reference.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, taken out.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, Request> Service<Request> for TimeoutService<S>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = TimeoutResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // A service that can keep no limit is not ready.
        if self.timer.is_stopped() {
            return Poll::Ready(Err(Box::new(TimerError::Stopped)));
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let response = self.inner.call(request);
        TimeoutResponseFuture {
            deadline: self.timer.timeout(self.limit, response),
            _running: self.timer.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response of a [`TimeoutService`]: the inner response, or an error once the limit
    /// has passed. It keeps its timer running.
    #[derive(Debug)]
    pub struct TimeoutResponseFuture<F> {
        #[pin]
        deadline: Deadline<F>,
        _running: KeepAlive,
    }
}

impl<F, T, E> Future for TimeoutResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().deadline.poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(response)) => Poll::Ready(response.map_err(Into::into)),
            Poll::Ready(Err(DeadlineError::Elapsed)) => Poll::Ready(Err(Box::new(Elapsed::new()))),
            Poll::Ready(Err(DeadlineError::Timer(e))) => Poll::Ready(Err(Box::new(e))),
        }
    }
}
