//! Measurement only (not built by cargo; see `README.md` here): `new_timeout` on a per-thread
//! lane instead of a locked queue shard, with as little else as possible, to see what that
//! design could reach. Each producer thread writes its entries into a ring of its own and
//! publishes them with a release store, then issues a SeqCst fence (what a lane needs so that
//! `stop()` either sees the entry or the producer sees the stop), takes a state from its own
//! 32-cell chunk (one reference count) and returns a handle; a worker thread drains every lane
//! each millisecond. Nothing else of the crate's bookkeeping: no pending count, no wake-up
//! check, no runs. Argument `c`: cancel each handle (a compare-and-swap), as the
//! `schedule_cancel` workload does. Environment `NOFENCE`: leave the fence out; `NODRAIN`:
//! the worker advances the rings without reading the entries (zero-sized tasks leak nothing).
//!
//! The ring is `unsafe` code: the reason this is an experiment and not the crate's design.
use std::cell::{RefCell, UnsafeCell};
use std::hint::black_box;
use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CAP: usize = 1 << 18;

type Task = Box<dyn Fn() + Send>;

struct Entry {
    task: Task,
    deadline: u64,
}

struct Lane {
    slots: Box<[UnsafeCell<MaybeUninit<Entry>>]>,
    tail: AtomicUsize,
    head: AtomicUsize,
}

// SAFETY (experiment): a slot is written by the one producer before `tail` is released past it
// and read by the one consumer after it acquired `tail`, and not written again before the
// consumer released `head` past it.
unsafe impl Sync for Lane {}

type Chunk = [AtomicU32; 32];

struct Shared {
    id: usize,
    state: AtomicU8,
    lanes: Mutex<Vec<Arc<Lane>>>,
    clock: quanta::Clock,
}

struct Producer {
    timer: usize,
    lane: Arc<Lane>,
    tail: usize,
    head_cache: usize,
    chunk: Option<Arc<Chunk>>,
    next: u8,
}

thread_local! {
    static PRODUCER: RefCell<Option<Producer>> = const { RefCell::new(None) };
}

struct Handle {
    chunk: Arc<Chunk>,
    idx: u8,
}

impl Handle {
    fn cancel(&self) -> bool {
        self.chunk[usize::from(self.idx)]
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

#[inline(never)]
fn new_timeout(sh: &Arc<Shared>, task: Task, delay: Duration, fenced: bool) -> Result<Handle, ()> {
    if sh.state.load(Ordering::Acquire) != 1 {
        return Err(());
    }
    let now = sh.clock.raw().wrapping_mul(1 << 30) >> 32;
    let deadline =
        now.saturating_add(delay.as_secs() * 1_000_000_000 + u64::from(delay.subsec_nanos()));
    PRODUCER.with(|p| {
        let mut p = p.borrow_mut();
        let p = match &mut *p {
            Some(p) if p.timer == sh.id => p,
            slot => register(sh, slot),
        };
        if p.tail - p.head_cache == CAP {
            loop {
                p.head_cache = p.lane.head.load(Ordering::Acquire);
                if p.tail - p.head_cache < CAP {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        // SAFETY (experiment): see `Lane`.
        unsafe {
            (*p.lane.slots[p.tail & (CAP - 1)].get()).write(Entry { task, deadline });
        }
        p.tail += 1;
        p.lane.tail.store(p.tail, Ordering::Release);
        if fenced {
            fence(Ordering::SeqCst);
        }
        if sh.state.load(Ordering::Relaxed) == 2 {
            return Err(());
        }
        let next = &mut p.next;
        let chunk = p.chunk.get_or_insert_with(|| {
            *next = 0;
            Arc::new(std::array::from_fn(|_| AtomicU32::new(0)))
        });
        let idx = *next;
        *next += 1;
        let chunk = if *next == 32 {
            p.chunk.take().unwrap()
        } else {
            Arc::clone(chunk)
        };
        Ok(Handle { chunk, idx })
    })
}

#[cold]
#[inline(never)]
fn register<'a>(sh: &Shared, slot: &'a mut Option<Producer>) -> &'a mut Producer {
    let lane = Arc::new(Lane {
        slots: (0..CAP)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect(),
        tail: AtomicUsize::new(0),
        head: AtomicUsize::new(0),
    });
    for slot in lane.slots.iter() {
        // SAFETY (experiment): touches the ring's pages before anything is published.
        unsafe { (*slot.get()).as_mut_ptr().write_bytes(0, 1) };
    }
    sh.lanes.lock().unwrap().push(Arc::clone(&lane));
    slot.insert(Producer {
        timer: sh.id,
        lane,
        tail: 0,
        head_cache: 0,
        chunk: None,
        next: 0,
    })
}

fn main() {
    let cancel = std::env::args().nth(1).as_deref() == Some("c");
    let fenced = std::env::var_os("NOFENCE").is_none();
    let n = 1_000_000usize;
    let mut res = vec![];
    for round in 0..8 {
        let sh = Arc::new(Shared {
            id: round + 1,
            state: AtomicU8::new(1),
            lanes: Mutex::new(Vec::new()),
            clock: quanta::Clock::new(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let sh = Arc::clone(&sh);
            let stop = Arc::clone(&stop);
            let skip = std::env::var_os("NODRAIN").is_some();
            std::thread::spawn(move || {
                let mut sum = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    let lanes = sh.lanes.lock().unwrap().clone();
                    for lane in lanes {
                        let head = lane.head.load(Ordering::Relaxed);
                        let tail = lane.tail.load(Ordering::Acquire);
                        for k in (head..tail).filter(|_| !skip) {
                            // SAFETY (experiment): see `Lane`.
                            let e =
                                unsafe { (*lane.slots[k & (CAP - 1)].get()).assume_init_read() };
                            sum = sum.wrapping_add(e.deadline);
                            drop(e.task);
                        }
                        lane.head.store(tail, Ordering::Release);
                    }
                }
                black_box(sum);
            })
        };
        new_timeout(&sh, Box::new(|| {}), Duration::from_secs(3600), fenced).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let t0 = Instant::now();
        for i in 0..n {
            let t = new_timeout(
                &sh,
                Box::new(|| {}),
                Duration::from_millis(30_000 + (i as u64 & 1023)),
                fenced,
            )
            .unwrap();
            if cancel {
                black_box(t.cancel());
            } else {
                black_box(&t);
            }
        }
        res.push(t0.elapsed().as_nanos() as f64 / n as f64);
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        sh.state.store(2, Ordering::SeqCst);
    }
    let mut s = res.clone();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{} median {:.1} min {:.1} all {:?}",
        if cancel { "sc" } else { "s" },
        s[s.len() / 2],
        s[0],
        res.iter()
            .map(|x| (x * 10.0).round() / 10.0)
            .collect::<Vec<_>>()
    );
}
