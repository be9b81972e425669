//! A tower timeout layer on the wheel, in the shape of `tower::timeout` (tower 0.5).
//!
//! Owns [`TimeoutLayer`], [`TimeoutService`] and [`TimeoutResponseFuture`]. Each call's
//! deadline is a [`Deadline`] around the inner service's response future (see
//! [`TimeoutService`]). A call past its limit fails with tower's own
//! `tower::timeout::error::Elapsed`, so that code written against `tower::timeout` matches it
//! unchanged. Touches only the crate's public futures.

use super::StoppedTimer;
use crate::{Deadline, DeadlineError, TimerHandle};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::timeout::error::Elapsed;
use tower::{BoxError, Layer, Service};

/// Applies a [`TimeoutService`] to every service it wraps: each request gets at most `limit`
/// to produce its response (`tower::timeout::TimeoutLayer`, on the wheel).
///
/// A limit ends at the end of the timer's tick it falls in: never early, up to about a tick
/// late, so limits round up to a tick. Build the timer with a service-grade tick,
/// `HashedWheelTimer::new(Duration::from_millis(1), 512)` as below; the default timer's tick is
/// Netty's 100 ms, on which a 50 ms limit fires up to 150 ms after the call.
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
/// # Keep the timer's owner alive
/// A [`TimerHandle`] does not keep its timer alive. If the owner ([`HashedWheelTimer`]) is
/// dropped while the service runs, the timer stops and no limit can be kept: every call whose
/// response is not ready when polled fails with
/// [`TimerError::Stopped`](crate::TimerError::Stopped) (see [`TimeoutService`]). That mistake
/// is logged (`log::error!`, naming `TimeoutLayer`) the first time a layer or service is built
/// on, or a call is made through, a stopped timer, once per process. Keep the owner for the
/// service's life, and stop it after the server.
///
/// [`HashedWheelTimer`]: crate::HashedWheelTimer
#[derive(Clone, Debug)]
pub struct TimeoutLayer {
    timer: TimerHandle,
    limit: Duration,
}

static STOPPED: StoppedTimer = StoppedTimer::new(
    "TimeoutLayer",
    "no limit can be kept, and every call whose response is not ready at once fails with \
     TimerError::Stopped",
);

impl TimeoutLayer {
    /// A layer that gives each request `limit`, measured by `timer`.
    ///
    /// ```
    /// # use hashed_timer_wheel::{HashedWheelTimer, TimeoutLayer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let layer = TimeoutLayer::new(timer.handle(), Duration::from_secs(5));
    /// # let _ = layer;
    /// ```
    pub fn new(timer: TimerHandle, limit: Duration) -> Self {
        STOPPED.check(&timer);
        TimeoutLayer { timer, limit }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = TimeoutService<S>;

    fn layer(&self, inner: S) -> TimeoutService<S> {
        TimeoutService::new(inner, self.timer.clone(), self.limit)
    }
}

/// A service whose responses fail with tower's own
/// [`Elapsed`](https://docs.rs/tower/0.5/tower/timeout/error/struct.Elapsed.html) when they
/// take longer than the limit (`tower::timeout::Timeout`, on the wheel).
///
/// `poll_ready` is the inner service's. A call's limit starts when its response future is
/// first polled and found pending (as [`Deadline`]'s: never earlier than from the call); the
/// inner service's errors pass through, boxed.
///
/// A stopped timer (stopped, or its owner dropped) can keep no limit. Each poll of a call's
/// response polls the inner response first, as `tower::timeout` does, so:
/// - a response that is ready when polled is returned, stopped timer or not;
/// - one that is still pending fails with
///   [`TimerError::Stopped`](crate::TimerError::Stopped), boxed: at its first poll when the
///   call was made on a stopped timer, at its next poll when the timer stops during the call
///   (the stop wakes it). The inner response future is dropped.
///
/// Building a service on, or calling through, a stopped timer logs an error once (see
/// [`TimeoutLayer`]).
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
    timer: TimerHandle,
    limit: Duration,
}

impl<S> TimeoutService<S> {
    /// `inner` with a limit of `limit` per call, measured by `timer`.
    ///
    /// ```
    /// # use hashed_timer_wheel::{HashedWheelTimer, TimeoutService};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    /// let service = TimeoutService::new((), timer.handle(), Duration::from_secs(1));
    /// assert_eq!(service.limit(), Duration::from_secs(1));
    /// ```
    pub fn new(inner: S, timer: TimerHandle, limit: Duration) -> Self {
        STOPPED.check(&timer);
        TimeoutService {
            inner,
            timer,
            limit,
        }
    }

    /// The limit each call gets.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// The inner service.
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
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        STOPPED.check(&self.timer);
        let response = self.inner.call(request);
        TimeoutResponseFuture {
            deadline: self.timer.timeout(self.limit, response),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response of a [`TimeoutService`]: the inner response, or an error once the limit
    /// has passed. Dropping it cancels its timeout.
    ///
    /// ```
    /// # use hashed_timer_wheel::{HashedWheelTimer, TimeoutService};
    /// # use std::time::Duration;
    /// use tower::{service_fn, Service};
    /// let timer = HashedWheelTimer::new(Duration::from_millis(1), 64);
    /// let inner = service_fn(|()| std::future::pending::<Result<(), std::convert::Infallible>>());
    /// let mut service = TimeoutService::new(inner, timer.handle(), Duration::from_secs(60));
    /// use std::future::Future;
    /// let mut response = Box::pin(service.call(()));
    /// let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// assert!(response.as_mut().poll(&mut cx).is_pending());
    /// assert_eq!(timer.pending_timeouts(), 1);
    /// drop(response); // the caller gave up: the timeout goes with it
    /// ```
    pub struct TimeoutResponseFuture<F> {
        #[pin]
        deadline: Deadline<F>,
    }
}

impl<F: fmt::Debug> fmt::Debug for TimeoutResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeoutResponseFuture")
            .field("deadline", &self.deadline)
            .finish()
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
