//! When the worker gives a drained burst's memory back while timeouts still wait
//! (`docs/performance.md`, "Trim after a burst"). Owns [`TrimSchedule`], the rule a turn asks
//! ([`TrimSchedule::step`]); the worker does the trim itself (`Worker::trim_if_due`: the wheel's
//! slab, then the task words). Touches nothing of the crate.
//!
//! A trim runs if slots were freed since the last, at most once per [`TRIM_NANOS`] of timer time
//! (backing off after trims that gave nothing back) or before a sleep that long; only if its
//! pass ends before the end of the tick the worker plans to wake at, so it never makes a
//! timeout late; and on a turn that ran no task, or after [`TRIM_DEFERRALS`] turns that did.

/// Timer time between two of an idle worker's trims, at least.
const TRIM_NANOS: u64 = 1_000_000_000;

/// The most a trim that gives nothing back doubles the wait for the next: 2^6 = 64 times.
const TRIM_BACKOFF: u32 = 6;

/// Turns that ran tasks a due trim waits out: waiting for one that ran none, a load that runs
/// tasks at every tick would never trim.
const TRIM_DEFERRALS: u32 = 8;

/// A turn's end, as the trim sees it.
pub(super) struct TurnEnd {
    /// The worker's tick after the turn.
    pub(super) tick: u64,
    /// The tick at whose end the worker plans to wake.
    pub(super) plan: u64,
    /// The worker's wrapping count of timeouts ended.
    pub(super) ended: usize,
    /// [`TRIM_NANOS`] in ticks of this timer, at least one ([`trim_ticks`]).
    pub(super) every: u64,
}

impl TurnEnd {
    fn sleeps_long(&self) -> bool {
        self.plan.saturating_sub(self.tick) >= self.every
    }
}

/// [`TRIM_NANOS`] in ticks of `tick_nanos`, at least one.
pub(super) fn trim_ticks(tick_nanos: u64) -> u64 {
    (TRIM_NANOS / tick_nanos).max(1)
}

/// What a turn does about the trim.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum TrimStep {
    /// Nothing: not due, no slot freed since the last trim, or no time for the pass.
    Skip,
    /// Due, but the turn ran tasks: look again at the end of the next tick.
    LookAgain,
    /// Trim now, then say so with [`TrimSchedule::trimmed`].
    Trim,
}

/// The trim's state between turns.
#[derive(Default)]
pub(super) struct TrimSchedule {
    /// The tick from which a turn may trim again.
    at: u64,
    /// Trims in a row that gave nothing back (each doubles the wait, up to [`TRIM_BACKOFF`]).
    fruitless: u32,
    /// `ended` at the last trim: until it moves, no slot has been freed since.
    ended_at_trim: usize,
    /// The plan of the long sleep the last trim came before (0: none): a turn by then was woken
    /// early, and waits for `at`.
    trimmed_before: u64,
    /// `ended` at the last turn: unchanged, the turn since ran no task.
    ended_at_turn: usize,
    /// Turns since the last trim that ran tasks while a trim was due.
    deferred: u32,
}

impl TrimSchedule {
    /// What the turn that ends as `turn` does; `has_time`: whether the pass would end before
    /// the end of the planned tick (asked only of a due trim, as it reads the clock).
    pub(super) fn step(&mut self, turn: &TurnEnd, has_time: impl FnOnce() -> bool) -> TrimStep {
        let quiet = std::mem::replace(&mut self.ended_at_turn, turn.ended) == turn.ended;
        let woken_early = turn.tick <= self.trimmed_before;
        let due = turn.tick >= self.at || (turn.sleeps_long() && !woken_early);
        if !due || turn.ended == self.ended_at_trim || !has_time() {
            return TrimStep::Skip;
        }
        if !quiet && self.deferred < TRIM_DEFERRALS {
            self.deferred += 1;
            return TrimStep::LookAgain;
        }
        TrimStep::Trim
    }

    /// After the trim [`TrimSchedule::step`] asked for: `given_back` pages.
    pub(super) fn trimmed(&mut self, turn: &TurnEnd, given_back: usize) {
        self.ended_at_trim = turn.ended;
        self.deferred = 0;
        self.trimmed_before = if turn.sleeps_long() { turn.plan } else { 0 };
        self.fruitless = match given_back {
            0 => (self.fruitless + 1).min(TRIM_BACKOFF),
            _ => 0,
        };
        self.at = turn.tick.saturating_add(turn.every << self.fruitless);
    }
}

#[cfg(test)]
mod tests {
    use super::{TrimSchedule, TrimStep, TurnEnd};
    use crate::worker::tests::with_worker;
    use crate::{HashedWheelTimer, ManualDriver, Timeout};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Each trim that gives nothing back doubles the wait for the next, up to 64 times
    /// [`super::trim_ticks`]; a trim waits for a slot freed since the last, for a turn that ran
    /// no task, and for the time its pass takes.
    #[test]
    fn trims_that_give_nothing_back_wait_twice_as_long_up_to_64_times() {
        let mut schedule = TrimSchedule::default();
        let mut waits = Vec::new();
        for ended in 1..=8 {
            let tick = schedule.at;
            let ran = TurnEnd {
                tick,
                plan: tick,
                ended,
                every: 100,
            };
            assert_eq!(schedule.step(&ran, || true), TrimStep::LookAgain);
            let quiet = TurnEnd {
                tick: tick + 1,
                ..ran
            };
            assert_eq!(schedule.step(&quiet, || false), TrimStep::Skip, "no time");
            assert_eq!(schedule.step(&quiet, || true), TrimStep::Trim);
            schedule.trimmed(&quiet, 0);
            waits.push(schedule.at - quiet.tick);
            let due = TurnEnd {
                tick: schedule.at,
                ..quiet
            };
            assert_eq!(
                schedule.step(&due, || true),
                TrimStep::Skip,
                "nothing freed"
            );
        }
        assert_eq!(waits, [200, 400, 800, 1600, 3200, 6400, 6400, 6400]);
    }

    const TICK: Duration = Duration::from_millis(10);
    const BURST: usize = 200_000;
    const LIVED: Duration = Duration::from_secs(30);

    /// Bytes the worker's wheel slab and task words hold.
    fn held_bytes(timer: &HashedWheelTimer) -> usize {
        with_worker(timer, |w| w.wheel.held_bytes() + w.tasks.held_bytes())
    }

    /// The worker holds under a twentieth of the `burst` bytes it held at the burst (`when`).
    fn assert_given_back(timer: &HashedWheelTimer, burst: usize, when: &str) {
        let after = held_bytes(timer);
        assert!(
            after * 20 < burst,
            "{after} bytes held {when}, {burst} at the burst"
        );
    }

    /// Schedules `n` timeouts that count their runs in `fired`, of each size class in turn (no
    /// words, two, four), the `i`th after `delay(i)`.
    fn schedule(
        timer: &HashedWheelTimer,
        n: usize,
        delay: impl Fn(usize) -> Duration,
        fired: &Arc<AtomicUsize>,
    ) {
        for i in 0..n {
            let (fired, delay) = (Arc::clone(fired), delay(i));
            let scheduled = match i % 3 {
                0 => timer.new_timeout(|_: &Timeout| {}, delay),
                1 => timer.new_timeout(
                    move |_: &Timeout| {
                        fired.fetch_add(1, Ordering::Relaxed);
                    },
                    delay,
                ),
                _ => {
                    let pad = [i as u64; 3];
                    timer.new_timeout(
                        move |_: &Timeout| {
                            std::hint::black_box(pad);
                            fired.fetch_add(1, Ordering::Relaxed);
                        },
                        delay,
                    )
                }
            };
            drop(scheduled.unwrap());
        }
    }

    /// Of `n` timeouts [`schedule`] makes, those that count their runs.
    fn counting(n: usize) -> usize {
        n - n.div_ceil(3)
    }

    fn manual(tick: Duration) -> (HashedWheelTimer, ManualDriver) {
        let builder = HashedWheelTimer::builder().tick_duration(tick);
        builder.build_manual().unwrap()
    }

    /// A load of `ticks` timeouts, one due at each tick from the first, and a burst of `burst`
    /// due at the fifth: their counts of runs.
    fn load_and_burst(
        timer: &HashedWheelTimer,
        tick: Duration,
        ticks: usize,
        burst: usize,
    ) -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let (steady, fired) = (Arc::default(), Arc::default());
        schedule(timer, ticks, |i| tick * (i as u32 + 1), &steady);
        schedule(timer, burst, |_| tick * 5, &fired);
        (steady, fired)
    }

    /// Advances `n` ticks of `tick`, a turn each; the most bytes the worker held meanwhile.
    fn run_by(tick: Duration, driver: &ManualDriver, timer: &HashedWheelTimer, n: usize) -> usize {
        (0..n).fold(0, |most, _| {
            driver.advance(tick);
            most.max(held_bytes(timer))
        })
    }

    /// A burst that drains while timeouts still wait (as a service's keep-alives always do)
    /// gives its memory back within a few seconds, not only once the wheel empties, though the
    /// worker wakes every few ticks; the waiting timeouts, scheduled before and amid the burst,
    /// fire at their deadline, new ones go in, and `stop()` returns those left.
    #[test]
    fn a_drained_burst_gives_its_memory_back_while_timeouts_wait() {
        let (timer, driver) = manual(TICK);
        let (fired, lived, paced) = (Arc::default(), Arc::default(), Arc::default());
        schedule(&timer, 3, |_| LIVED, &lived);
        let hour: Vec<Timeout> = (0..3)
            .map(|_| timer.new_timeout(|_: &Timeout| {}, Duration::from_secs(3600)))
            .collect::<Result<_, _>>()
            .unwrap();
        // Due every 5 ticks for 4 s: the worker never plans a long sleep.
        schedule(&timer, 80, |i| TICK * (5 * i as u32 + 5), &paced);
        // Due over a second: a trim comes as it drains, and the next a second later.
        let spread = |i: usize| TICK * (10 + (i % 100) as u32);
        schedule(&timer, BURST / 2, spread, &fired);
        schedule(&timer, 3, |_| LIVED, &lived);
        schedule(&timer, BURST / 2, spread, &fired);
        let burst = run_by(TICK, &driver, &timer, 400);
        assert_eq!(fired.load(Ordering::Relaxed), 2 * counting(BURST / 2));
        assert_given_back(&timer, burst, "after the burst");
        schedule(&timer, 5_000, |_| TICK * 2, &fired);
        run_by(TICK, &driver, &timer, 4);
        let expected = 2 * counting(BURST / 2) + counting(5_000);
        assert_eq!(fired.load(Ordering::Relaxed), expected);
        driver.advance_to(LIVED - TICK);
        assert_eq!(lived.load(Ordering::Relaxed), 0, "not early");
        driver.advance_to(LIVED + TICK);
        assert_eq!(lived.load(Ordering::Relaxed), 2 * counting(3));
        assert_eq!(timer.pending_timeouts(), 3);
        let mut stopped = timer.stop().unwrap();
        stopped.retain(|t| hour.contains(t));
        assert_eq!(stopped.len(), 3);
    }

    /// A load that runs tasks at every tick keeps the worker turning at each tick's end, never
    /// idle: a drained burst's memory still comes back, once the trim has waited out
    /// `TRIM_DEFERRALS` turns that ran tasks, and the load's timeouts each fire at their tick.
    #[test]
    fn a_load_that_runs_tasks_at_every_tick_still_trims() {
        let (timer, driver) = manual(TICK);
        let ticks = 400;
        let (steady, fired) = load_and_burst(&timer, TICK, ticks, BURST);
        // Each fires at the end of the tick after its deadline's.
        let burst = run_by(TICK, &driver, &timer, 6);
        assert_eq!(fired.load(Ordering::Relaxed), counting(BURST));
        let waited = super::TRIM_DEFERRALS as usize;
        assert_eq!(
            run_by(TICK, &driver, &timer, waited),
            burst,
            "the trim waits"
        );
        driver.advance(TICK);
        assert_given_back(&timer, burst, "after");
        let turned = 6 + waited + 1;
        assert_eq!(steady.load(Ordering::Relaxed), counting(turned - 1));
        run_by(TICK, &driver, &timer, ticks + 1 - turned);
        assert_eq!(steady.load(Ordering::Relaxed), counting(ticks));
        assert_eq!(timer.pending_timeouts(), 0);
    }

    /// A trim whose pass would not end before the end of the tick the worker turns at next
    /// waits for a turn with the time: under a load at every 1 ms tick, a slab of 300 000
    /// slots (1.5 ms at 5 ns a slot) is trimmed once the load pauses, not during it.
    #[test]
    fn a_trim_waits_for_a_turn_with_the_time_for_its_pass() {
        let tick = Duration::from_millis(1);
        let (timer, driver) = manual(tick);
        let ticks = 100;
        let (steady, fired) = load_and_burst(&timer, tick, ticks, 3 * BURST / 2);
        let advance = |n: usize| run_by(tick, &driver, &timer, n);
        let burst = advance(6);
        assert_eq!(fired.load(Ordering::Relaxed), counting(3 * BURST / 2));
        assert_eq!(
            advance(ticks - 6),
            burst,
            "no turn under the load has the time"
        );
        assert_eq!(steady.load(Ordering::Relaxed), counting(ticks - 1));
        advance(2);
        assert_eq!(steady.load(Ordering::Relaxed), counting(ticks));
        assert_given_back(&timer, burst, "after the load");
    }

    /// A turn that runs tasks does not trim, though its sleep is long: a thread a task woke may
    /// wait for the worker's CPU. The next turn, which runs none, trims (on the worker's thread
    /// it comes at the end of the next tick, which the turn asks for).
    #[test]
    fn a_turn_that_runs_tasks_leaves_the_trim_to_the_next() {
        let (timer, driver) = manual(TICK);
        let (fired, hour) = (Arc::default(), Arc::default());
        schedule(&timer, 3, |_| Duration::from_secs(3600), &hour);
        schedule(&timer, BURST, |_| TICK * 5, &fired);
        let burst = run_by(TICK, &driver, &timer, 4);
        assert_eq!(fired.load(Ordering::Relaxed), 0);
        run_by(TICK, &driver, &timer, 2);
        assert_eq!(fired.load(Ordering::Relaxed), counting(BURST));
        assert_eq!(
            held_bytes(&timer),
            burst,
            "the turn that ran the burst trims nothing"
        );
        driver.advance(TICK);
        assert_given_back(&timer, burst, "after");
    }
}
