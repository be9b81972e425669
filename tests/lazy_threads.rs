//! Building a timer starts no thread (Netty's contract), and the first `new_timeout` starts one
//! thread, the timer's worker, and no other: a timer has no thread but its worker, started
//! lazily. The test is alone in its process, so that no other test starts or ends a thread
//! while it looks.

use hashed_timer_wheel::{HashedWheelTimer, Timeout};
use std::time::Duration;

/// The names of this process's threads (Linux: `/proc/self/task/*/comm`); `None` without procfs.
fn thread_names() -> Option<Vec<String>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut names: Vec<String> = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect();
    names.sort();
    Some(names)
}

#[test]
fn building_timers_starts_no_thread_and_the_first_timeout_starts_only_the_worker() {
    let Some(before) = thread_names() else {
        return; // no procfs: nothing to look at
    };
    let timer = HashedWheelTimer::builder()
        .tick_duration(Duration::from_millis(1))
        .thread_name("htw-lazy")
        .build()
        .unwrap();
    let plain = HashedWheelTimer::new(Duration::from_millis(10), 64);
    let (manual, _driver) = HashedWheelTimer::builder().build_manual().unwrap();
    assert_eq!(
        thread_names(),
        Some(before.clone()),
        "building timers started a thread"
    );

    timer
        .new_timeout(|_: &Timeout| {}, Duration::from_secs(3600))
        .unwrap();
    // The new thread names itself once it runs: until then it shows its parent's name.
    let named = |names: &Vec<String>| names.iter().any(|name| name == "htw-lazy");
    let mut after = thread_names().unwrap();
    let start = std::time::Instant::now();
    while !named(&after) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
        after = thread_names().unwrap();
    }
    assert!(
        named(&after),
        "the first timeout starts the worker: {after:?}"
    );
    let mut expected = before;
    expected.push("htw-lazy".to_owned());
    expected.sort();
    assert_eq!(
        after, expected,
        "the first timeout starts the worker and no other thread"
    );
    assert!(timer.stop().unwrap().len() == 1);
    drop((plain, manual));
}
