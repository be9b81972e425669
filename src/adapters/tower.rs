//! A tower timeout layer on the wheel, in the shape of `tower::timeout` (tower 0.5).
//!
//! Owns [`TimeoutLayer`], [`TimeoutService`], [`ResponseFuture`] and [`Elapsed`]. Each call's
//! deadline is a [`Deadline`] around the inner service's response future:
//! scheduled when the response future is first polled and pending (never, for a response
//! ready at once), cancelled when it completes or is dropped. Touches only the crate's public futures.

use crate::{Deadline, DeadlineError, TimerHandle};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower_service::Service;

/// The error a [`TimeoutService`] returns: `tower::BoxError`, the same type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Applies a [`TimeoutService`] to every service it wraps: each request gets at most `limit`
/// to produce its response (`tower::timeout::TimeoutLayer`, on the wheel).
///
/// ```
/// use hashed_timer_wheel::{tower::Elapsed, HashedWheelTimer, TimeoutLayer};
/// use std::time::Duration;
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
/// let slow = ServiceBuilder::new()
///     .layer(TimeoutLayer::new(timer.handle(), Duration::from_millis(5)))
///     .service(service_fn(|_: ()| std::future::pending::<Result<(), std::convert::Infallible>>()));
/// let error = futures::executor::block_on(slow.oneshot(())).unwrap_err();
/// assert!(error.is::<Elapsed>());
/// ```
#[derive(Clone, Debug)]
pub struct TimeoutLayer {
    timer: TimerHandle,
    limit: Duration,
}

impl TimeoutLayer {
    /// A layer that gives each request `limit`, measured by `timer`.
    ///
    /// ```
    /// # use hashed_timer_wheel::{HashedWheelTimer, TimeoutLayer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// let layer = TimeoutLayer::new(timer.handle(), Duration::from_secs(5));
    /// # let _ = layer;
    /// ```
    pub fn new(timer: TimerHandle, limit: Duration) -> Self {
        TimeoutLayer { timer, limit }
    }
}

impl<S> tower_layer::Layer<S> for TimeoutLayer {
    type Service = TimeoutService<S>;

    fn layer(&self, inner: S) -> TimeoutService<S> {
        TimeoutService::new(inner, self.timer.clone(), self.limit)
    }
}

/// A service whose responses fail with [`Elapsed`] when they take longer than the limit
/// (`tower::timeout::Timeout`, on the wheel).
///
/// `poll_ready` is the inner service's. A call's limit starts when its response future is
/// first polled and found pending (as [`Deadline`]'s: never earlier than from the call); the
/// inner service's errors pass through, boxed; a stopped timer fails the call with its
/// [`TimerError`](crate::TimerError), boxed.
///
/// ```
/// use hashed_timer_wheel::{tower::TimeoutService, HashedWheelTimer};
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
    /// # use hashed_timer_wheel::{tower::TimeoutService, HashedWheelTimer};
    /// # use std::time::Duration;
    /// let timer = HashedWheelTimer::default();
    /// let service = TimeoutService::new((), timer.handle(), Duration::from_secs(1));
    /// assert_eq!(service.limit(), Duration::from_secs(1));
    /// ```
    pub fn new(inner: S, timer: TimerHandle, limit: Duration) -> Self {
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
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let response = self.inner.call(request);
        ResponseFuture {
            deadline: self.timer.timeout(self.limit, response),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response of a [`TimeoutService`]: the inner response, or an error once the limit
    /// has passed. Dropping it cancels its timeout.
    ///
    /// ```
    /// # use hashed_timer_wheel::{tower::TimeoutService, HashedWheelTimer};
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
    pub struct ResponseFuture<F> {
        #[pin]
        deadline: Deadline<F>,
    }
}

impl<F: fmt::Debug> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().deadline.poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(response)) => Poll::Ready(response.map_err(Into::into)),
            Poll::Ready(Err(DeadlineError::Elapsed)) => Poll::Ready(Err(Box::new(Elapsed(())))),
            Poll::Ready(Err(DeadlineError::Timer(e))) => Poll::Ready(Err(Box::new(e))),
        }
    }
}

/// The error of a call that passed its limit (`tower::timeout::error::Elapsed`'s
/// counterpart): downcast the [`BoxError`] to it. Transient: the next call gets its own limit.
///
/// ```
/// # use hashed_timer_wheel::tower::{BoxError, Elapsed};
/// let error: BoxError = Box::new(Elapsed::new());
/// assert!(error.is::<Elapsed>());
/// assert_eq!(error.to_string(), "request timed out");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Elapsed(());

impl Elapsed {
    /// An `Elapsed` error.
    pub fn new() -> Self {
        Elapsed(())
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("request timed out")
    }
}

impl std::error::Error for Elapsed {}
