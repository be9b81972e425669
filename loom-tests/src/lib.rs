//! Loom models of `hashed-timer-wheel`'s concurrent protocols live in `tests/`, one file per
//! protocol; this library is their shared harness. Everything compiles only under `--cfg loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p loom-tests --release
//! ```
//!
//! See `README.md` for what each model covers and how to replay a failure.

#[cfg(loom)]
pub use harness::*;

#[cfg(loom)]
mod harness {
    use hashed_timer_wheel::{HashedWheelTimer, ManualDriver, NeverRan, Timeout, TimerError};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Preemption bound when `LOOM_MAX_PREEMPTIONS` is not set (an unbounded search of the
    /// models with a real worker thread does not finish in useful time).
    pub const DEFAULT_PREEMPTIONS: usize = 2;

    /// One tick of every model's timer (the smallest the timer accepts).
    pub const TICK: Duration = Duration::from_millis(1);

    /// Wheel size of every model's timer: tiny, the wheel itself is sequential code.
    pub const WHEEL: usize = 4;

    /// A timer with no worker thread: the model calls its tick through the driver.
    pub fn manual_timer(max_pending: usize) -> (Owned<HashedWheelTimer>, ManualDriver) {
        let (timer, driver) = HashedWheelTimer::builder()
            .tick_duration(TICK)
            .ticks_per_wheel(WHEEL)
            .max_pending_timeouts(max_pending)
            .build_manual()
            .expect("valid arguments");
        (Owned(Some(timer)), driver)
    }

    /// A timer with a real (loom) worker thread on a manual clock: a bounded sleep jumps the
    /// clock to its end (unless the model holds the clock), an unbounded one is a loom park.
    pub fn threaded_timer(max_pending: usize) -> Owned<HashedWheelTimer> {
        Owned(Some(
            HashedWheelTimer::builder()
                .tick_duration(TICK)
                .ticks_per_wheel(WHEEL)
                .max_pending_timeouts(max_pending)
                .build()
                .expect("valid arguments"),
        ))
    }

    /// A model's timer. Dropped normally when the model ends, but leaked when the model fails:
    /// dropping a timer stops it, which calls into loom again while loom's failure unwinds,
    /// and that double panic would abort the whole test binary instead of reporting.
    #[derive(Debug)]
    pub struct Owned<T>(Option<T>);

    impl<T> std::ops::Deref for Owned<T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_ref().expect("present until dropped")
        }
    }

    impl<T> Drop for Owned<T> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                std::mem::forget(self.0.take());
            }
        }
    }

    /// Explores every interleaving of `f` (up to the preemption bound) and prints one line:
    /// the model's name, the iterations explored and the wall time.
    ///
    /// Settings come from loom's environment variables (`LOOM_MAX_PREEMPTIONS`,
    /// `LOOM_CHECKPOINT_FILE`, `LOOM_CHECKPOINT_INTERVAL`, `LOOM_LOCATION`, `LOOM_LOG`,
    /// `LOOM_MAX_BRANCHES`, ...), read by `loom::model::Builder::new()`.
    pub fn check<F>(name: &str, f: F)
    where
        F: Fn() + Sync + Send + 'static,
    {
        check_capped(name, usize::MAX, f);
    }

    /// [`check`] with the preemption bound capped at `cap`: for a model of more threads, whose
    /// interleavings at the common bound would take the run's whole budget (the model says why
    /// its cap suffices).
    pub fn check_capped<F>(name: &str, cap: usize, f: F)
    where
        F: Fn() + Sync + Send + 'static,
    {
        let iterations = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&iterations);
        let body = move || {
            counter.fetch_add(1, SeqCst);
            f();
        };
        let start = Instant::now();
        // Reports the iteration a failing model stopped at (the panic unwinds through here).
        struct OnFailure<'a>(&'a str, &'a AtomicUsize, Instant);
        impl Drop for OnFailure<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    let n = self.1.load(SeqCst);
                    eprintln!("loom model {}: FAILED in iteration {n}", self.0);
                    report(self.0, n, self.2.elapsed(), "-", "FAILED");
                }
            }
        }
        let _report = OnFailure(name, &iterations, start);
        let bound;
        if std::env::var_os("LOOM_LOG").is_some() {
            // `loom::model` installs the `tracing` subscriber that prints the log; it takes
            // every setting from the environment.
            bound = std::env::var("LOOM_MAX_PREEMPTIONS").unwrap_or_else(|_| "none".into());
            loom::model(body);
        } else {
            let mut builder = loom::model::Builder::new();
            let preemptions = builder.preemption_bound.unwrap_or(DEFAULT_PREEMPTIONS);
            builder.preemption_bound = Some(preemptions.min(cap));
            bound = format!("{}", builder.preemption_bound.unwrap_or_default());
            builder.check(body);
        }
        let (n, took) = (iterations.load(SeqCst), start.elapsed());
        eprintln!("loom model {name}: {n} iterations in {took:.2?} (preemption bound {bound})");
        report(name, n, took, &bound, "ok");
    }

    /// Appends a model's result to the file named by `LOOM_TESTS_REPORT` (`run.sh` prints them
    /// as a table): name, iterations, seconds, preemption bound, ok or FAILED.
    fn report(name: &str, iterations: usize, took: Duration, bound: &str, status: &str) {
        use std::io::Write;
        let Some(path) = std::env::var_os("LOOM_TESTS_REPORT") else {
            return;
        };
        let line = format!(
            "{name}\t{iterations}\t{:.2}\t{bound}\t{status}\n",
            took.as_secs_f64()
        );
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("cannot append to LOOM_TESTS_REPORT {path:?}: {e}");
        }
    }

    /// What happened to one timeout, as seen by the model: the invariant is that every accepted
    /// timeout ends exactly once.
    #[derive(Clone, Default, Debug)]
    pub struct Probe(Arc<Counts>);

    #[derive(Default, Debug)]
    struct Counts {
        /// Times its task ran.
        ran: AtomicUsize,
        /// `cancel()` calls that returned true.
        cancel_wins: AtomicUsize,
        /// Times `stop()` returned it.
        returned: AtomicUsize,
        /// Runs that happened before the earliest time the task was allowed to run.
        early: AtomicUsize,
    }

    // Plain std atomics: loom runs a model on one OS thread, and every count is read after the
    // threads that wrote it were joined (or signalled through a loom primitive). Loom atomics
    // here would only add scheduling points that test nothing.
    impl Probe {
        /// A probe with nothing recorded.
        pub fn new() -> Probe {
            Probe::default()
        }

        /// A task that records its run.
        pub fn task(&self) -> impl FnOnce(&Timeout) + Send + 'static {
            let p = self.clone();
            move |t: &Timeout| {
                // A running task sees its timeout expired; checked afterwards, because a panic
                // in a task is caught and logged by the timer.
                if t.is_expired() {
                    p.0.ran.fetch_add(1, SeqCst);
                } else {
                    p.0.ran.fetch_add(1000, SeqCst);
                }
            }
        }

        /// A task that records its run and whether it ran before `earliest` on `driver`'s
        /// clock (a lower bound of its deadline, read before `new_timeout`).
        pub fn task_not_before(
            &self,
            driver: &ManualDriver,
            earliest: Duration,
        ) -> impl FnOnce(&Timeout) + Send + 'static {
            let driver = driver.clone();
            let early = Arc::clone(&self.0);
            self.task_then(move |_: &Timeout| {
                if driver.now() < earliest {
                    early.early.fetch_add(1, SeqCst);
                }
            })
        }

        /// A task that records its run, then runs `then`.
        pub fn task_then<G>(&self, then: G) -> impl FnOnce(&Timeout) + Send + 'static
        where
            G: FnOnce(&Timeout) + Send + 'static,
        {
            let run = self.task();
            move |t: &Timeout| {
                run(t);
                then(t);
            }
        }

        /// `t.cancel()`, recording a win.
        pub fn cancel(&self, t: &Timeout) -> bool {
            let won = t.cancel();
            if won {
                self.0.cancel_wins.fetch_add(1, SeqCst);
            }
            won
        }

        /// Times the task ran.
        pub fn ran(&self) -> usize {
            self.0.ran.load(SeqCst)
        }

        /// `cancel()` calls that returned true.
        pub fn cancel_wins(&self) -> usize {
            self.0.cancel_wins.load(SeqCst)
        }

        /// Times `stop()` returned the timeout (booked by [`book_stopped`]).
        pub fn returned(&self) -> usize {
            self.0.returned.load(SeqCst)
        }

        /// The invariant for an accepted timeout: its task ran once, or one `cancel()` won, or
        /// `stop()` returned it; exactly one of these, and its state agrees.
        pub fn assert_ended_once(&self, t: &Timeout, what: &str) {
            let (ran, won, returned) = (self.ran(), self.cancel_wins(), self.returned());
            let early = self.0.early.load(SeqCst);
            assert_eq!(early, 0, "{what}: fired before its deadline");
            assert_eq!(
                ran + won + returned,
                1,
                "{what}: ran {ran}, cancel won {won}, returned by stop {returned}; state {t:?}"
            );
            if ran == 1 {
                assert!(t.is_expired() && !t.is_cancelled(), "{what}: ran but {t:?}");
            } else {
                assert!(
                    t.is_cancelled() && !t.is_expired(),
                    "{what}: cancelled but {t:?}"
                );
            }
            assert!(!t.cancel(), "{what}: a cancel after the end won");
        }

        /// The invariant for a refused timeout: nothing happened to it, and it was not counted.
        pub fn assert_never_ran(&self, what: &str) {
            assert_eq!(
                (self.ran(), self.cancel_wins(), self.returned()),
                (0, 0, 0),
                "{what}: refused, yet it ended"
            );
        }

        /// Checks a `new_timeout` result against the invariant: accepted and ended once, or
        /// refused with one of `allowed` and never ran.
        pub fn assert_outcome(
            &self,
            result: &Result<Timeout, TimerError>,
            allowed: &[TimerError],
            what: &str,
        ) {
            match result {
                Ok(t) => self.assert_ended_once(t, what),
                Err(e) => {
                    assert!(allowed.contains(e), "{what}: unexpected refusal {e:?}");
                    self.assert_never_ran(what);
                }
            }
        }
    }

    /// Books what `stop()` returned against the probes of the accepted timeouts. Everything
    /// returned must be cancelled and belong to exactly one accepted timeout.
    pub fn book_stopped(returned: &[NeverRan], accepted: &[(Option<&Timeout>, &Probe)]) {
        for r in returned {
            assert!(r.is_cancelled(), "stop returned {r:?}, not cancelled");
            let owners: Vec<_> = accepted
                .iter()
                .filter(|(t, _)| t.is_some_and(|t| *r == *t))
                .collect();
            assert_eq!(owners.len(), 1, "stop returned a timeout nobody accepted");
            owners[0].1 .0.returned.fetch_add(1, SeqCst);
        }
    }

    /// A one-shot flag the thread that made it can wait on without spinning: `wait` parks (a
    /// loom park) until `set` is called, so a wake-up the timer loses shows up as a loom
    /// deadlock. `set` unparks the waiter only while it is inside `wait` (std's futex parker on
    /// a loom atomic): loom's unpark would also wake it out of a `join` or a lock, which loom
    /// then reports as an error (tokio-rs/loom#249).
    #[derive(Clone, Debug)]
    pub struct Signal(Arc<SignalInner>);

    #[derive(Debug)]
    struct SignalInner {
        set: loom::sync::atomic::AtomicBool,
        /// EMPTY, NOTIFIED or PARKED, as in the library's loom shim.
        park: loom::sync::atomic::AtomicU8,
        waiter: loom::thread::Thread,
    }

    const EMPTY: u8 = 0;
    const NOTIFIED: u8 = 1;
    const PARKED: u8 = 2;

    impl Signal {
        /// A signal not set yet, that the calling thread will wait on.
        #[allow(clippy::new_without_default)]
        pub fn new() -> Signal {
            Signal(Arc::new(SignalInner {
                set: loom::sync::atomic::AtomicBool::new(false),
                park: loom::sync::atomic::AtomicU8::new(EMPTY),
                waiter: loom::thread::current(),
            }))
        }

        /// Sets the flag and wakes the waiter.
        pub fn set(&self) {
            self.0.set.store(true, SeqCst);
            if self.0.park.swap(NOTIFIED, SeqCst) == PARKED {
                self.0.waiter.unpark();
            }
        }

        /// Whether `set` was called.
        pub fn is_set(&self) -> bool {
            self.0.set.load(SeqCst)
        }

        /// Blocks until `set` is called. Only the thread that made the signal may wait.
        pub fn wait(&self) {
            let park = &self.0.park;
            while !self.0.set.load(SeqCst) {
                if park
                    .compare_exchange(EMPTY, PARKED, SeqCst, SeqCst)
                    .is_err()
                {
                    // A token: consume it (by a read-modify-write, as every access here: loom
                    // orders plain stores only partially against them) and look again.
                    park.swap(EMPTY, SeqCst);
                    continue;
                }
                // Only `set` moves PARKED on, and it then unparks us.
                loop {
                    loom::thread::park();
                    if park
                        .compare_exchange(NOTIFIED, EMPTY, SeqCst, SeqCst)
                        .is_ok()
                    {
                        break;
                    }
                }
            }
        }
    }

    /// A waker that counts its wake-ups and sets a [`Signal`] the thread that made it can wait
    /// on. (A std atomic for the count: it is read after the threads that wake were joined.)
    #[derive(Debug)]
    pub struct Counting {
        /// Wake-ups so far.
        pub wakes: AtomicUsize,
        /// Set at the first wake-up.
        pub woken: Signal,
    }

    impl std::task::Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.wakes.fetch_add(1, SeqCst);
            self.woken.set();
        }
    }

    /// A counting waker; the calling thread is the one that may wait on it.
    pub fn counting() -> (Arc<Counting>, std::task::Waker) {
        let counting = Arc::new(Counting {
            wakes: AtomicUsize::new(0),
            woken: Signal::new(),
        });
        (Arc::clone(&counting), std::task::Waker::from(counting))
    }
}
