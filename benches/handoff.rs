//! How a new timeout reaches the worker, modelled outside the crate: the engine's hand-off (the
//! entry goes by value through the producer's segment; the worker moves it into its node), against
//! one record per timeout in safe Rust (the producer writes the deadline and the task into a slot
//! the worker then links and runs in place, with only the id queued). Safe code cannot share a
//! slot between a producer that writes its task and a worker that takes it without a cell per
//! slot; three are measured: crossbeam's `AtomicCell` (its striped lock for a 16-byte value), a
//! `Mutex`, and an `AtomicCell` of a thin pointer (lock-free, a second box per task).
//!
//! ```text
//! cargo bench --bench handoff          # N = 10^6 timeouts a round, 5 rounds
//! ```
//!
//! Per round and design: nanoseconds a timeout on the producer's thread (make the 24-byte task,
//! hand it off) and on the worker's, started after the producer ended so that every line moves
//! between cores (take the timeouts, link them in order, then run each task and free its box).
//! Memory is allocated and touched before the timed parts. `docs/performance.md` reads the figures.

use crossbeam_utils::atomic::AtomicCell;
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

type Task = Box<dyn FnOnce(&mut u64) + Send>;

/// A task that captures 24 bytes, as `expire`'s does.
fn task(i: u64) -> Task {
    let (a, b, c) = (i, i.wrapping_mul(3), i ^ 7);
    Box::new(move |sum: &mut u64| *sum += a + b + c)
}

/// Runs `phase` on a thread of its own: what it returns, and its nanoseconds per timeout.
fn on_thread<T: Send + 'static>(n: usize, phase: impl FnOnce() -> T + Send + 'static) -> (T, f64) {
    let start = Instant::now();
    let out = thread::spawn(phase).join().unwrap();
    (out, start.elapsed().as_nanos() as f64 / n as f64)
}

/// The worker's node: links, deadline and task, as the wheel keeps them.
struct Node {
    next: u32,
    prev: u32,
    deadline: u64,
    task: Option<Task>,
}

/// The engine's hand-off: (id, deadline, task) through a segment, moved into the node.
fn by_value(n: usize) -> [f64; 2] {
    let mut segment: Vec<(u32, u64, Task)> = (0..n).map(|_| (0, 0, task(0))).collect();
    segment.clear();
    let mut nodes: Vec<Node> = (0..n)
        .map(|_| Node {
            next: u32::MAX,
            prev: u32::MAX,
            deadline: 0,
            task: None,
        })
        .collect();
    let (mut segment, produced) = on_thread(n, move || {
        for i in 0..n {
            segment.push((i as u32, i as u64 * 10, task(i as u64)));
        }
        segment
    });
    let ((), worked) = on_thread(n, move || {
        let mut last = u32::MAX;
        for (id, deadline, task) in segment.drain(..) {
            let node = &mut nodes[id as usize];
            (node.deadline, node.task, node.prev) = (deadline, Some(task), last);
            if last != u32::MAX {
                nodes[last as usize].next = id;
            }
            last = id;
        }
        run_all(
            nodes
                .iter_mut()
                .map(|node| (node.deadline, node.task.take())),
        );
    });
    [produced, worked]
}

/// Runs each task, reading its deadline first.
fn run_all(tasks: impl Iterator<Item = (u64, Option<Task>)>) {
    let mut sum = 0;
    for (deadline, task) in tasks {
        black_box(deadline);
        if let Some(task) = task {
            task(&mut sum);
        }
    }
    black_box(sum);
}

/// A cell in a shared slot: the producer puts the task, the worker takes it.
trait Cell: Default + Send + Sync + 'static {
    fn put(&self, task: Task);
    fn take(&self) -> Option<Task>;
}

#[derive(Default)]
struct Striped(AtomicCell<Option<Task>>);

impl Cell for Striped {
    fn put(&self, task: Task) {
        self.0.store(Some(task));
    }
    fn take(&self) -> Option<Task> {
        self.0.take()
    }
}

#[derive(Default)]
struct Locked(Mutex<Option<Task>>);

impl Cell for Locked {
    fn put(&self, task: Task) {
        *self.0.lock().unwrap() = Some(task);
    }
    fn take(&self) -> Option<Task> {
        self.0.lock().unwrap().take()
    }
}

#[derive(Default)]
struct Thin(AtomicCell<Option<Box<Task>>>);

impl Cell for Thin {
    fn put(&self, task: Task) {
        self.0.store(Some(Box::new(task)));
    }
    fn take(&self) -> Option<Task> {
        self.0.take().map(|task| *task)
    }
}

/// One record: everything a timeout has, in its slot; links written by the worker only.
#[derive(Default)]
struct Record<C> {
    deadline: AtomicU64,
    next: AtomicU32,
    prev: AtomicU32,
    task: C,
}

/// One record per timeout, its task in a cell of kind `C`; only the id is queued.
fn one_record<C: Cell>(n: usize) -> [f64; 2] {
    let records: Arc<Vec<Record<C>>> = Arc::new((0..n).map(|_| Record::default()).collect());
    let mut ids: Vec<u32> = (0..n as u32).collect();
    ids.clear();
    let shared = Arc::clone(&records);
    let (ids, produced) = on_thread(n, move || {
        for i in 0..n {
            shared[i].deadline.store(i as u64 * 10, Relaxed);
            shared[i].task.put(task(i as u64));
            ids.push(i as u32);
        }
        ids
    });
    let ((), worked) = on_thread(n, move || {
        let mut last = u32::MAX;
        for id in ids {
            let record = &records[id as usize];
            black_box(record.deadline.load(Relaxed));
            record.prev.store(last, Relaxed);
            if last != u32::MAX {
                records[last as usize].next.store(id, Relaxed);
            }
            last = id;
        }
        run_all(
            records
                .iter()
                .map(|r| (r.deadline.load(Relaxed), r.task.take())),
        );
    });
    [produced, worked]
}

/// A design: producer and worker nanoseconds a timeout for `n` timeouts.
type Design = fn(usize) -> [f64; 2];

fn main() {
    let n = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let designs: [(&str, Design); 4] = [
        ("by_value", by_value),
        ("atomic_cell", one_record::<Striped>),
        ("mutex", one_record::<Locked>),
        ("thin_atomic_cell", one_record::<Thin>),
    ];
    for round in 0..rounds {
        for (name, run) in designs {
            let [producer, worker] = run(n);
            println!(
                "RESULT round={round} design={name} producer_ns={producer:.1} worker_ns={worker:.1}"
            );
        }
    }
}
