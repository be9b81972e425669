//! An HTTP service on the wheel: hyper's timer (header read timeout), a tower timeout per
//! request (504 when the handler is too slow), and a `DelayQueue` of idle sessions (a session
//! unused for `IDLE` is closed). One timer serves all three.
//!
//! The program runs a client against its own server on 127.0.0.1, checks what it sees, and
//! exits: non-zero (a panic) if anything is off.
//!
//! ```sh
//! cargo run --example http_service --features hyper,tower
//! ```

use bytes::Bytes;
use hashed_timer_wheel::{DelayQueue, HashedWheelTimer, HyperTimer, TimeoutLayer, TimerHandle};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tower::timeout::error::Elapsed;
use tower::{service_fn, ServiceBuilder, ServiceExt};

/// A session unused this long is closed.
const IDLE: Duration = Duration::from_millis(300);
/// What a request may take.
const REQUEST_LIMIT: Duration = Duration::from_millis(100);
/// What a client may take to send a request head.
const HEADER_READ: Duration = Duration::from_millis(500);

type Body = Full<Bytes>;

/// What the handlers ask of the sessions' owner.
enum Command {
    Open(oneshot::Sender<u64>),
    /// Marks a session used; answers whether it is still open.
    Touch(u64, oneshot::Sender<bool>),
}

/// Owns the sessions: their idle deadlines in a `DelayQueue`, each reset on use. Sends every
/// closed session to `closed`.
async fn sessions(
    timer: TimerHandle,
    mut commands: mpsc::UnboundedReceiver<Command>,
    closed: mpsc::UnboundedSender<u64>,
) {
    let mut idle = DelayQueue::new(timer);
    let mut open = HashMap::new();
    let mut next_id = 0;
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Open(reply)) => {
                    next_id += 1;
                    open.insert(next_id, idle.insert(next_id, IDLE));
                    let _ = reply.send(next_id);
                }
                Some(Command::Touch(id, reply)) => {
                    let key = open.get(&id);
                    if let Some(key) = key {
                        idle.reset(key, IDLE);
                    }
                    let _ = reply.send(key.is_some());
                }
                None => return,
            },
            // `None` (no session open) disables this branch until the next turn of the loop.
            Some(expired) = poll_fn(|cx| idle.poll_expired(cx)) => {
                let id = expired.into_inner();
                open.remove(&id);
                let _ = closed.send(id);
            }
        }
    }
}

/// The application: `/login` opens a session, `/work/<id>` uses one, `/slow` takes too long.
async fn handle(
    commands: mpsc::UnboundedSender<Command>,
    timer: TimerHandle,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_owned();
    let reply = |status: StatusCode, text: String| {
        let mut response = Response::new(Full::new(Bytes::from(text)));
        *response.status_mut() = status;
        Ok(response)
    };
    if path == "/login" {
        let (tx, rx) = oneshot::channel();
        let _ = commands.send(Command::Open(tx));
        return reply(StatusCode::OK, rx.await.unwrap_or(0).to_string());
    }
    if let Some(id) = path.strip_prefix("/work/").and_then(|id| id.parse().ok()) {
        let (tx, rx) = oneshot::channel();
        let _ = commands.send(Command::Touch(id, tx));
        return match rx.await {
            Ok(true) => reply(StatusCode::OK, "done".into()),
            _ => reply(StatusCode::GONE, "session closed".into()),
        };
    }
    if path == "/slow" {
        let _ = timer.sleep(Duration::from_secs(5)).await;
        return reply(StatusCode::OK, "finally".into());
    }
    reply(StatusCode::NOT_FOUND, String::new())
}

/// Serves HTTP/1 on `listener`: the wheel as hyper's timer, and each request through a tower
/// stack with a timeout; a request past its limit gets a 504.
async fn serve(
    listener: TcpListener,
    timer: TimerHandle,
    commands: mpsc::UnboundedSender<Command>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let (timer, commands) = (timer.clone(), commands.clone());
        tokio::spawn(async move {
            let app = ServiceBuilder::new()
                .layer(TimeoutLayer::new(timer.clone(), REQUEST_LIMIT))
                .service(service_fn({
                    let timer = timer.clone();
                    move |request| handle(commands.clone(), timer.clone(), request)
                }));
            let per_request = hyper::service::service_fn(move |request| {
                let app = app.clone();
                async move {
                    match app.oneshot(request).await {
                        Ok(response) => Ok(response),
                        Err(e) if e.is::<Elapsed>() => {
                            let mut response = Response::new(Full::new(Bytes::from("too slow")));
                            *response.status_mut() = StatusCode::GATEWAY_TIMEOUT;
                            Ok::<_, Infallible>(response)
                        }
                        Err(e) => panic!("the handlers do not fail: {e}"),
                    }
                }
            });
            // A connection that ends badly (a header read timeout) is the client's business.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(HyperTimer::new(timer))
                .header_read_timeout(HEADER_READ)
                .serve_connection(TokioIo::new(stream), per_request)
                .await;
        });
    }
}

/// A keep-alive client connection.
struct Client(hyper::client::conn::http1::SendRequest<Body>);

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        Client(sender)
    }

    async fn get(&mut self, path: &str) -> (StatusCode, String) {
        self.0.ready().await.expect("the connection is ready");
        let request = Request::get(path)
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .expect("a request");
        let response = self.0.send_request(request).await.expect("a response");
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

async fn check(addr: SocketAddr, mut closed: mpsc::UnboundedReceiver<u64>) {
    let mut client = Client::connect(addr).await;
    let (_, a) = client.get("/login").await;
    let (_, b) = client.get("/login").await;
    // Use session a every 100 ms for 600 ms; leave b idle.
    let opened = Instant::now();
    for _ in 0..6 {
        let (status, _) = client.get(&format!("/work/{a}")).await;
        assert_eq!(status, StatusCode::OK, "session {a} in use stays open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = closed.recv().await.expect("a closed session");
    assert_eq!(first.to_string(), b, "the idle session closes first");
    assert!(opened.elapsed() >= IDLE, "never before its idle time");
    let (status, _) = client.get(&format!("/work/{b}")).await;
    assert_eq!(status, StatusCode::GONE);
    println!("idle session {b} closed; session {a} kept open by use");

    // A handler past the request limit: 504, at the limit, not at the handler's 5 s.
    let start = Instant::now();
    let (status, _) = client.get("/slow").await;
    let took = start.elapsed();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(
        took >= REQUEST_LIMIT && took < REQUEST_LIMIT * 5,
        "{took:?}"
    );
    println!("/slow: 504 after {took:?} (limit {REQUEST_LIMIT:?})");

    // A client that sends half a request head is cut off at the header read timeout.
    let start = Instant::now();
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /work/1 HTTP/1.1\r\nHo")
        .await
        .expect("write");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest).await;
    let took = start.elapsed();
    assert!(took >= HEADER_READ && took < HEADER_READ * 2, "{took:?}");
    println!("half-sent head: closed after {took:?} (header read timeout {HEADER_READ:?})");

    // Left alone, session a closes too.
    let last = closed.recv().await.expect("a closed session");
    assert_eq!(last.to_string(), a);
    println!("session {a} closed once idle");
}

fn main() {
    // One timer for the whole service: 1 ms ticks.
    let timer = HashedWheelTimer::new(Duration::from_millis(1), 512);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        let (commands, requests) = mpsc::unbounded_channel();
        let (closed_tx, closed) = mpsc::unbounded_channel();
        tokio::spawn(sessions(timer.handle(), requests, closed_tx));
        tokio::spawn(serve(listener, timer.handle(), commands));
        tokio::time::timeout(Duration::from_secs(10), check(addr, closed))
            .await
            .expect("the checks finish within 10 s");
    });
    println!(
        "all checks passed; pending timeouts at exit: {}",
        timer.pending_timeouts()
    );
}
