//! A load harness for a real hyper + tower service under `wrk`, on two stacks that differ only
//! in what times them:
//!
//! - `--stack wheel`: one `HashedWheelTimer` (1 ms tick, 512 buckets) behind hyper's timer
//!   (`HyperTimer`), the tower timeout (`TimeoutLayer`), the handler's sleep (`timer.sleep`)
//!   and the idle sessions (`DelayQueue`);
//! - `--stack tokio`: hyper-util's `TokioTimer`, `tower::timeout::TimeoutLayer`,
//!   `tokio::time::sleep` and tokio-util's `DelayQueue`.
//!
//! The service: HTTP/1 with keep-alive and a 2 s header read timeout, on a two-worker tokio
//! runtime; each request passes a 50 ms tower timeout (504 past it) into a handler that marks
//! the connection's session used (a `DelayQueue` of sessions idle for 1 s, owned by one task)
//! and sleeps a random 0-100 ms, so that about half of the requests time out.
//!
//! One invocation measures one run: the server starts on 127.0.0.1, `wrk` warms it up, then
//! `wrk -t1 -cC -dDs --latency` loads it while the process's own threads are sampled from
//! `/proc/self/task` before and after. The figures come out as `RESULT` lines, one figure per
//! line, and a `THREAD` line per thread. `--slow-clients N` measures instead when the server
//! closes N connections that never finish a request head. `benches/service/run.sh` runs the
//! A/B rounds and summarizes them; `benches/service/README.md` says what each field means.
//!
//! ```text
//! cargo bench --bench service --features hyper,tower,stream -- --stack wheel --connections 64 --duration 10
//! cargo bench --bench service --features hyper,tower,stream -- --stack tokio --slow-clients 2000
//! ```

use bytes::Bytes;
use hashed_timer_wheel::{DelayQueue, HashedWheelTimer, HyperTimer, TimerHandle};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::{Command as Process, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tower::{Layer, Service, ServiceExt};

/// What a client may take to send a request head (and what an idle keep-alive connection may
/// wait for the next one).
const HEADER_READ: Duration = Duration::from_secs(2);
/// What a request may take before it is answered 504.
const REQUEST_LIMIT: Duration = Duration::from_millis(50);
/// The handler sleeps up to this long (uniformly), so about half of the requests pass the limit.
const MAX_PAUSE_US: u64 = 100_000;
/// A session unused this long is closed.
const IDLE: Duration = Duration::from_secs(1);
/// The runtime's worker threads' name, to tell them apart in `/proc/self/task`.
const WORKER_NAME: &str = "svc-worker";
/// The timer's thread name: `Builder::thread_name`'s default, which this harness keeps.
const TIMER_NAME: &str = "hashed-wheel-timer";
/// The slow clients' own thread.
const SLOW_NAME: &str = "slow-clients";
/// How long a slow client waits for the server to close before it counts as never closed.
const SLOW_BOUND: Duration = Duration::from_secs(10);

type Body = Full<Bytes>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stack {
    /// The wheel on its own worker thread.
    Wheel,
    /// The wheel driven from the runtime's threads (`HashedWheelTimer::drive`).
    Driven,
    Tokio,
}

impl Stack {
    fn name(self) -> &'static str {
        match self {
            Stack::Wheel => "wheel",
            Stack::Driven => "driven",
            Stack::Tokio => "tokio",
        }
    }
}

/// The command line.
struct Args {
    stack: Stack,
    connections: u32,
    duration_s: u32,
    warmup_s: u32,
    slow_clients: Option<usize>,
    wrk: String,
}

const USAGE: &str = "usage: service --stack wheel|driven|tokio [--connections C] [--duration D] \
                     [--warmup W] [--wrk PATH] [--slow-clients N]";

/// `Ok(None)`: no stack named (`cargo bench` runs every bench with only `--bench`).
fn parse_args() -> Result<Option<Args>, String> {
    let mut stack = None;
    let mut args = Args {
        stack: Stack::Wheel,
        connections: 64,
        duration_s: 10,
        warmup_s: 2,
        slow_clients: None,
        wrk: "wrk".to_owned(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue;
        }
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--stack" => {
                stack = Some(match value()?.as_str() {
                    "wheel" => Stack::Wheel,
                    "driven" => Stack::Driven,
                    "tokio" => Stack::Tokio,
                    other => return Err(format!("unknown stack {other}")),
                })
            }
            "--connections" => args.connections = number(value()?)? as u32,
            "--duration" => args.duration_s = number(value()?)? as u32,
            "--warmup" => args.warmup_s = number(value()?)? as u32,
            "--slow-clients" => args.slow_clients = Some(number(value()?)? as usize),
            "--wrk" => args.wrk = value()?,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(stack.map(|stack| Args { stack, ..args }))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("service: a load run needs a stack; see benches/service/README.md ({USAGE})");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("service: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // A run that hangs (a wrk that never returns, a server that never closes) ends here
    // rather than holding the rounds forever.
    let bound = Duration::from_secs(u64::from(args.warmup_s + args.duration_s) + 60);
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            std::thread::sleep(bound);
            eprintln!("service: still running after {bound:?}; giving up");
            std::process::exit(3);
        })
        .expect("a watchdog thread");
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("service: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    // Built (and its thread started by the first timeout) only for the wheel stack, so that
    // the tokio stack carries no idle timer thread.
    let timer = (args.stack != Stack::Tokio).then(|| {
        HashedWheelTimer::builder()
            .tick_duration(Duration::from_millis(1))
            .ticks_per_wheel(512)
            .build()
            .expect("a valid timer configuration")
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(WORKER_NAME)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let listener = rt
        .block_on(bind())
        .map_err(|e| format!("bind 127.0.0.1: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let counts = Arc::new(SessionCounts::default());
    let (commands, received) = mpsc::unbounded_channel();
    match &timer {
        Some(timer) => {
            let handle = timer.handle();
            if args.stack == Stack::Driven {
                rt.spawn(timer.drive(|at| tokio::time::sleep_until(at.into())));
            }
            rt.spawn(sessions(
                DelayQueue::new(handle.clone()),
                received,
                counts.clone(),
            ));
            rt.spawn(accept(
                listener,
                hashed_timer_wheel::TimeoutLayer::new(handle.clone(), REQUEST_LIMIT),
                HyperTimer::new(handle.clone()),
                Ctx {
                    timer: Some(handle),
                    commands,
                },
            ));
        }
        None => {
            rt.spawn(sessions(
                tokio_util::time::DelayQueue::new(),
                received,
                counts.clone(),
            ));
            rt.spawn(accept(
                listener,
                tower::timeout::TimeoutLayer::new(REQUEST_LIMIT),
                TokioTimer::new(),
                Ctx {
                    timer: None,
                    commands,
                },
            ));
        }
    }
    let stack = args.stack.name();
    if let Some(n) = args.slow_clients {
        let closes = slow_clients(addr, n)?;
        report_slow(stack, n, &closes);
    } else {
        load(args, addr, timer.as_ref(), &counts)?;
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// A listener with a backlog for thousands of simultaneous connects (the slow clients), so
/// that none waits on a dropped SYN.
async fn bind() -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    socket.listen(4096)
}

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/// What every connection's handler shares.
#[derive(Clone)]
struct Ctx {
    /// The wheel stack's timer; `None`: tokio's.
    timer: Option<TimerHandle>,
    commands: mpsc::UnboundedSender<SessionCommand>,
}

enum SessionCommand {
    /// A connection's first request.
    Open(u64),
    /// A later request: the session's idle deadline moves (a session already closed opens
    /// again).
    Touch(u64),
}

#[derive(Default)]
struct SessionCounts {
    opened: AtomicU64,
    expired: AtomicU64,
}

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// The idle sessions' queue, as the sessions task needs it from either stack's `DelayQueue`.
trait IdleQueue: Send + 'static {
    type Key: Send + 'static;
    fn open(&mut self, id: u64) -> Self::Key;
    fn touch(&mut self, key: &Self::Key);
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<Option<u64>>;
}

impl IdleQueue for DelayQueue<u64> {
    type Key = hashed_timer_wheel::delay_queue::Key;

    fn open(&mut self, id: u64) -> Self::Key {
        self.insert(id, IDLE)
    }

    fn touch(&mut self, key: &Self::Key) {
        self.reset(key, IDLE);
    }

    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<Option<u64>> {
        self.poll_expired(cx).map(|e| e.map(|e| e.into_inner()))
    }
}

impl IdleQueue for tokio_util::time::DelayQueue<u64> {
    type Key = tokio_util::time::delay_queue::Key;

    fn open(&mut self, id: u64) -> Self::Key {
        self.insert(id, IDLE)
    }

    fn touch(&mut self, key: &Self::Key) {
        self.reset(key, IDLE);
    }

    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<Option<u64>> {
        self.poll_expired(cx).map(|e| e.map(|e| e.into_inner()))
    }
}

/// Owns the sessions: their idle deadlines in `queue`, each reset on use.
async fn sessions<Q: IdleQueue>(
    mut queue: Q,
    mut commands: mpsc::UnboundedReceiver<SessionCommand>,
    counts: Arc<SessionCounts>,
) {
    let mut open = HashMap::new();
    loop {
        tokio::select! {
            command = commands.recv() => {
                let id = match command {
                    Some(SessionCommand::Open(id) | SessionCommand::Touch(id)) => id,
                    None => return,
                };
                match open.get(&id) {
                    Some(key) => queue.touch(key),
                    None => {
                        open.insert(id, queue.open(id));
                        counts.opened.fetch_add(1, Relaxed);
                    }
                }
            }
            // `None` (no session open) disables this branch until the next turn of the loop.
            Some(id) = poll_fn(|cx| queue.poll_idle(cx)) => {
                open.remove(&id);
                counts.expired.fetch_add(1, Relaxed);
            }
        }
    }
}

thread_local! {
    /// Each thread's xorshift state: cheap, and no lock between the workers.
    static RNG: Cell<u64> = Cell::new(seed());
}

static NEXT_SEED: AtomicU64 = AtomicU64::new(0);

/// Deterministic seeds: the n-th thread to draw gets splitmix64(n), never zero.
fn seed() -> u64 {
    let mut z = NEXT_SEED
        .fetch_add(1, Relaxed)
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

fn random() -> u64 {
    RNG.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    })
}

/// The application: one per connection, cloned per request.
#[derive(Clone)]
struct Handler {
    ctx: Ctx,
    /// The connection's session; 0 until its first request.
    session: Arc<AtomicU64>,
}

impl Service<Request<Incoming>> for Handler {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Incoming>) -> Self::Future {
        // hyper serves a connection's requests one at a time: no race on the session.
        let command = match self.session.load(Relaxed) {
            0 => {
                let id = NEXT_SESSION.fetch_add(1, Relaxed);
                self.session.store(id, Relaxed);
                SessionCommand::Open(id)
            }
            id => SessionCommand::Touch(id),
        };
        let _ = self.ctx.commands.send(command);
        let pause = Duration::from_micros(random() % (MAX_PAUSE_US + 1));
        let timer = self.ctx.timer.clone();
        Box::pin(async move {
            match timer {
                Some(timer) => {
                    let _ = timer.sleep(pause).await;
                }
                None => tokio::time::sleep(pause).await,
            }
            Ok(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
        })
    }
}

fn status(code: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = code;
    response
}

/// Accepts connections and serves each with `layer` around the handler and `hyper_timer` as
/// hyper's timer.
async fn accept<L, T>(listener: TcpListener, layer: L, hyper_timer: T, ctx: Ctx)
where
    L: Layer<Handler> + Clone + Send + 'static,
    L::Service: Service<Request<Incoming>, Response = Response<Body>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    <L::Service as Service<Request<Incoming>>>::Future: Send,
    T: hyper::rt::Timer + Clone + Send + Sync + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = layer.layer(Handler {
            ctx: ctx.clone(),
            session: Arc::new(AtomicU64::new(0)),
        });
        let hyper_timer = hyper_timer.clone();
        tokio::spawn(async move {
            let per_request = hyper::service::service_fn(move |request| {
                let app = app.clone();
                async move {
                    Ok::<_, Infallible>(match app.oneshot(request).await {
                        Ok(response) => response,
                        // Both stacks' layers fail with tower's own `Elapsed`.
                        Err(e) if e.is::<tower::timeout::error::Elapsed>() => {
                            status(StatusCode::GATEWAY_TIMEOUT, "too slow\n")
                        }
                        Err(_) => status(StatusCode::INTERNAL_SERVER_ERROR, "error\n"),
                    })
                }
            });
            // A connection that ends badly (a header read timeout, a reset) is the client's
            // business.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_timer)
                .keep_alive(true)
                .header_read_timeout(HEADER_READ)
                .serve_connection(TokioIo::new(stream), per_request)
                .await;
        });
    }
}

// ---------------------------------------------------------------------------------------------
// The load run
// ---------------------------------------------------------------------------------------------

/// One thread's counters, as `/proc/self/task/<tid>` gives them.
#[derive(Clone, Debug)]
struct ThreadSample {
    comm: String,
    cpu_ns: u64,
    voluntary: u64,
    involuntary: u64,
}

fn status_field(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Every thread of this process; a thread that ends while it is read is left out.
fn sample_threads() -> BTreeMap<u32, ThreadSample> {
    let mut threads = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return threads;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let dir = task.path();
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        let (Some(comm), Some(schedstat), Some(status)) =
            (read("comm"), read("schedstat"), read("status"))
        else {
            continue;
        };
        threads.insert(
            tid,
            ThreadSample {
                comm: comm.trim().to_owned(),
                cpu_ns: schedstat
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                voluntary: status_field(&status, "voluntary_ctxt_switches").unwrap_or(0),
                involuntary: status_field(&status, "nonvoluntary_ctxt_switches").unwrap_or(0),
            },
        );
    }
    threads
}

/// The kernel keeps the first 15 bytes of a thread's name.
fn comm_of(name: &str) -> &str {
    &name[..name.len().min(15)]
}

fn group_of(comm: &str) -> &'static str {
    if comm == comm_of(WORKER_NAME) {
        "workers"
    } else if comm == comm_of(TIMER_NAME) {
        "timer"
    } else {
        "others"
    }
}

/// What wrk reported.
#[derive(Default, Debug)]
struct WrkReport {
    rps: f64,
    requests: u64,
    non_2xx: u64,
    socket_errors: u64,
    p50_ms: f64,
    p99_ms: f64,
}

/// wrk's durations: `980.00us`, `50.12ms`, `1.20s`, `2.00m`.
fn wrk_ms(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit {
        "us" => 0.001,
        "ms" => 1.0,
        "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return None,
    };
    Some(number * scale)
}

fn parse_wrk(output: &str) -> Result<WrkReport, String> {
    let mut report = WrkReport::default();
    let (mut seen_rps, mut seen_requests) = (false, false);
    for line in output.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", value] => {
                report.rps = value.parse().map_err(|_| format!("wrk: {line}"))?;
                seen_rps = true;
            }
            [count, "requests", "in", ..] => {
                report.requests = count.parse().map_err(|_| format!("wrk: {line}"))?;
                seen_requests = true;
            }
            ["Non-2xx", "or", "3xx", "responses:", count] => {
                report.non_2xx = count.parse().map_err(|_| format!("wrk: {line}"))?;
            }
            ["50%", value] => report.p50_ms = wrk_ms(value).ok_or(format!("wrk: {line}"))?,
            ["99%", value] => report.p99_ms = wrk_ms(value).ok_or(format!("wrk: {line}"))?,
            ["Socket", "errors:", rest @ ..] => {
                // "connect 0, read 0, write 0, timeout 0"
                report.socket_errors = rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum();
            }
            _ => {}
        }
    }
    if !seen_rps || !seen_requests || report.requests == 0 {
        return Err(format!("wrk's output lacks its figures:\n{output}"));
    }
    Ok(report)
}

fn wrk(args: &Args, addr: SocketAddr, seconds: u32) -> Result<String, String> {
    let output = Process::new(&args.wrk)
        .arg("-t1")
        .arg(format!("-c{}", args.connections))
        .arg(format!("-d{seconds}s"))
        .arg("--latency")
        .arg(format!("http://{addr}/"))
        .output()
        .map_err(|e| {
            format!(
                "cannot run {} ({e}): install wrk (apt-get install -y wrk)",
                args.wrk
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "wrk failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| status_field(&s, "VmRSS"))
        .map_or(0.0, |kb| kb as f64 / 1024.0)
}

/// The class of `TimerStats::lateness` (under 1, 1-2, 2-4, ... 64+ ticks) that holds the 99th
/// percentile, as its upper bound in ticks; `inf` for the last class.
fn lateness_p99(classes: &[u64; 8]) -> String {
    let total: u64 = classes.iter().sum();
    if total == 0 {
        return "0".into();
    }
    let mut seen = 0;
    for (i, &n) in classes.iter().enumerate() {
        seen += n;
        if seen * 100 >= total * 99 {
            return if i == 7 {
                "inf".into()
            } else {
                (1u64 << i).to_string()
            };
        }
    }
    "inf".into()
}

fn load(
    args: &Args,
    addr: SocketAddr,
    timer: Option<&HashedWheelTimer>,
    counts: &SessionCounts,
) -> Result<(), String> {
    if args.warmup_s > 0 {
        wrk(args, addr, args.warmup_s)?;
    }
    let stats_before = timer.map(|t| t.stats());
    let sessions_before = (counts.opened.load(Relaxed), counts.expired.load(Relaxed));
    let before = sample_threads();
    let output = wrk(args, addr, args.duration_s)?;
    let after = sample_threads();
    let stats_after = timer.map(|t| t.stats());
    let report = parse_wrk(&output)?;

    let id = format!("stack={} c={}", args.stack.name(), args.connections);
    let mut groups: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for (tid, now) in &after {
        // A thread born in the window counts from zero.
        let (cpu, vol, invol) = before
            .get(tid)
            .map_or((0, 0, 0), |b| (b.cpu_ns, b.voluntary, b.involuntary));
        let d = (
            now.cpu_ns.saturating_sub(cpu),
            now.voluntary.saturating_sub(vol),
            now.involuntary.saturating_sub(invol),
        );
        let group = group_of(&now.comm);
        let g = groups.entry(group).or_default();
        g.0 += d.0;
        g.1 += d.1;
        g.2 += d.2;
        println!(
            "THREAD {id} group={group} tid={tid} name={} cpu_ms={:.1} voluntary={} involuntary={}",
            now.comm,
            d.0 as f64 / 1e6,
            d.1,
            d.2
        );
    }
    let total = groups
        .values()
        .fold((0, 0, 0), |t, g| (t.0 + g.0, t.1 + g.1, t.2 + g.2));
    let requests = report.requests as f64;
    let result = |key: &str, value: String| println!("RESULT {id} {key}={value}");
    result(
        "cpu_us_per_req",
        format!("{:.2}", total.0 as f64 / 1e3 / requests),
    );
    result("rps", format!("{:.1}", report.rps));
    result("p50_ms", format!("{:.2}", report.p50_ms));
    result("p99_ms", format!("{:.2}", report.p99_ms));
    result(
        "share_504",
        format!("{:.4}", report.non_2xx as f64 / requests),
    );
    result("rss_mb", format!("{:.1}", rss_mb()));
    result("requests", report.requests.to_string());
    result("socket_errors", report.socket_errors.to_string());
    result("cpu_ms", format!("{:.1}", total.0 as f64 / 1e6));
    // Every voluntary switch is a thread going to sleep, so one wake-up to come.
    result("wakeups_voluntary", total.1.to_string());
    result(
        "voluntary_per_req",
        format!("{:.3}", total.1 as f64 / requests),
    );
    result("involuntary", total.2.to_string());
    for group in ["workers", "timer", "others"] {
        let g = groups.get(group).copied().unwrap_or_default();
        result(
            &format!("{group}_cpu_ms"),
            format!("{:.1}", g.0 as f64 / 1e6),
        );
        result(&format!("{group}_voluntary"), g.1.to_string());
        result(&format!("{group}_involuntary"), g.2.to_string());
    }
    result(
        "sessions_opened",
        (counts.opened.load(Relaxed) - sessions_before.0).to_string(),
    );
    result(
        "sessions_expired",
        (counts.expired.load(Relaxed) - sessions_before.1).to_string(),
    );
    if let (Some(b), Some(a)) = (stats_before, stats_after) {
        let mut classes = [0; 8];
        for (i, c) in classes.iter_mut().enumerate() {
            *c = a.lateness[i] - b.lateness[i];
        }
        result("wakeups", (a.wakeups - b.wakeups).to_string());
        result("expired", (a.expired - b.expired).to_string());
        result("late_p99_ticks", lateness_p99(&classes));
        // The timer's lifetime maximum (warm-up included): the stats keep no window.
        result(
            "late_max_ms",
            format!("{:.3}", a.late_max.as_secs_f64() * 1e3),
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Slow clients
// ---------------------------------------------------------------------------------------------

/// Opens `n` connections to `addr` that never finish a request head (even ones send half of
/// one, odd ones nothing) and returns, for each, how long after its connect began the server
/// closed it: `None` if it did not within `SLOW_BOUND`. The clients run on a thread
/// and runtime of their own, apart from the server's workers.
fn slow_clients(addr: SocketAddr, n: usize) -> Result<Vec<(bool, Option<Duration>)>, String> {
    let clients = std::thread::Builder::new()
        .name(SLOW_NAME.into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("client runtime: {e}"))?;
            rt.block_on(async move {
                let tasks: Vec<_> = (0..n)
                    .map(|i| tokio::spawn(slow_client(addr, i % 2 == 0)))
                    .collect();
                let mut closes = Vec::with_capacity(n);
                for (i, task) in tasks.into_iter().enumerate() {
                    closes.push((i % 2 == 0, task.await.ok().flatten()));
                }
                Ok(closes)
            })
        })
        .map_err(|e| format!("slow clients' thread: {e}"))?;
    clients
        .join()
        .map_err(|_| "the slow clients panicked".to_owned())?
}

async fn slow_client(addr: SocketAddr, half_head: bool) -> Option<Duration> {
    // Timed from before the connect: the server's header read timeout starts when it first
    // reads the accepted connection, after this, so a close measured under 2 s is an early
    // timeout and not the client's own lag (with thousands of connects in flight, this task
    // may run well after its connect completes).
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).await.ok()?;
    if half_head {
        stream.write_all(b"GET / HTTP/1.1\r\nHo").await.ok()?;
    }
    let mut buf = [0; 256];
    loop {
        match tokio::time::timeout_at((start + SLOW_BOUND).into(), stream.read(&mut buf)).await {
            // Closed (or reset): when does not depend on how.
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            // A response (hyper may answer a timed-out head): the close follows.
            Ok(Ok(_)) => continue,
            Err(_) => return None,
        }
    }
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e3
}

fn report_slow(stack: &str, n: usize, closes: &[(bool, Option<Duration>)]) {
    let id = format!("stack={stack} slow_clients={n}");
    let result = |key: &str, value: String| println!("RESULT {id} {key}={value}");
    let mut all: Vec<Duration> = closes.iter().filter_map(|c| c.1).collect();
    all.sort();
    result("closed", all.len().to_string());
    result("p50_close_ms", format!("{:.1}", percentile_ms(&all, 0.5)));
    result("p99_close_ms", format!("{:.1}", percentile_ms(&all, 0.99)));
    result(
        "max_close_ms",
        format!("{:.1}", all.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)),
    );
    result(
        "min_close_ms",
        format!("{:.1}", all.first().map_or(0.0, |d| d.as_secs_f64() * 1e3)),
    );
    for (half, name) in [(true, "half_head"), (false, "silent")] {
        let mut some: Vec<Duration> = closes
            .iter()
            .filter(|c| c.0 == half)
            .filter_map(|c| c.1)
            .collect();
        some.sort();
        result(&format!("{name}_closed"), some.len().to_string());
        result(
            &format!("{name}_p50_close_ms"),
            format!("{:.1}", percentile_ms(&some, 0.5)),
        );
    }
}
