//! Measurement only (not built by cargo; see `README.md` here): the floor of `new_timeout`,
//! taken apart. One thread, no worker, a loop of 10^6 "schedules", each: a TSC read and its
//! scaling, two pushes (a 16-byte task, an 8-byte deadline), a state from a 32-cell chunk.
//!
//! The argument's letters pick the parts:
//! - `m`: the pushes under a `Mutex` (the crate's queue shard); otherwise none, or with `f`
//!   a SeqCst fence after them (what a lock-free per-thread lane needs against `stop()`);
//! - `r`: no handle (no reference count); otherwise a clone of the chunk's `Arc`, dropped at
//!   once, as a `Timeout` is in the `schedule` workload;
//! - `t`: no TSC read (the loop counter instead);
//! - `c`: a compare-and-swap on the handle's state (a `cancel`).
use std::hint::black_box;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

type Chunk = [AtomicU32; 32];

#[derive(Default)]
struct Inner {
    tasks: Vec<(usize, usize)>,
    deadlines: Vec<u64>,
    chunk: Option<Arc<Chunk>>,
    next: u8,
}

#[inline(always)]
fn push(g: &mut Inner, deadline: u64, handle: bool) -> Option<(Arc<Chunk>, u8)> {
    if g.tasks.len() == 1 << 17 {
        g.tasks.clear();
        g.deadlines.clear();
    }
    g.tasks.push((1, 0x1234));
    g.deadlines.push(deadline);
    let next = &mut g.next;
    let chunk = g.chunk.get_or_insert_with(|| {
        *next = 0;
        Arc::new(std::array::from_fn(|_| AtomicU32::new(0)))
    });
    let h = handle.then(|| (Arc::clone(chunk), g.next));
    g.next += 1;
    if g.next == 32 {
        g.chunk = None;
    }
    h
}

fn main() {
    let v = std::env::args().nth(1).unwrap_or_default();
    let has = |c| v.contains(c);
    let (locked, fenced, handle, tsc, cancel) =
        (has('m'), has('f'), !has('r'), !has('t'), has('c'));
    let clock = quanta::Clock::new();
    let shard = Mutex::new(Inner::default());
    let mut local = Inner::default();
    let n = 1_000_000u64;
    let mut res = vec![];
    for _ in 0..10 {
        let t0 = Instant::now();
        for i in 0..n {
            let now = if tsc {
                clock.raw().wrapping_mul(1 << 30) >> 32
            } else {
                black_box(i)
            };
            let deadline = now.saturating_add(30_000_000_000 + (i & 1023) * 1_000_000);
            let h = if locked {
                push(&mut shard.lock().unwrap(), deadline, handle)
            } else {
                let h = push(&mut local, deadline, handle);
                if fenced {
                    fence(Ordering::SeqCst);
                }
                h
            };
            if let (true, Some((chunk, idx))) = (cancel, &h) {
                let cell = &chunk[usize::from(*idx)];
                black_box(
                    cell.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok(),
                );
            }
            black_box(&h);
        }
        res.push(t0.elapsed().as_nanos() as f64 / n as f64);
    }
    let mut sorted = res.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "{v} median {:.1} min {:.1} all {:?}",
        sorted[sorted.len() / 2],
        sorted[0],
        res.iter()
            .map(|x| (x * 10.0).round() / 10.0)
            .collect::<Vec<_>>()
    );
}
