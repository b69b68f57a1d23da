//! Two processes over tcp and shm: this test binary runs itself again as
//! the peer (the ignored test `peer_process`, with KVFABRIC_TEST_PEER set),
//! which registers a buffer, prints its name and address, and answers
//! "check" and "fill" lines about its own bytes.
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use kvfabric::{Engine, Error, Request, TaskState};

const PEER_SIZE: usize = 8 << 20;

fn pattern(i: u64, seed: u64) -> u8 {
    (i.wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(40503)) >> 7) as u8
}

fn fill(bytes: &mut [u8], start: u64, seed: u64) {
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = pattern(start + i as u64, seed);
    }
}

fn first_wrong(bytes: &[u8], start: u64, seed: u64) -> usize {
    bytes.iter().enumerate().position(|(i, b)| *b != pattern(start + i as u64, seed)).unwrap_or(bytes.len())
}

/// The peer's side: runs only when this binary was started as the peer.
#[test]
#[ignore = "the peer process of the other tests"]
fn peer_process() {
    let Ok(protocol) = std::env::var("KVFABRIC_TEST_PEER") else { return };
    let engine = Engine::builder().protocol(protocol).build().expect("peer engine");
    let mut buf = vec![0u8; PEER_SIZE];
    let mut region = engine.register(&mut buf).expect("peer register");
    println!("PEER {} {}", engine.name(), region.addr());
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        let w: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| w[i].parse::<u64>().expect("number");
        match w.first() {
            Some(&"check") => {
                let (off, len) = (n(1) as usize, n(2) as usize);
                println!("{}", first_wrong(&region.bytes()[off..off + len], off as u64, n(3)));
            }
            Some(&"fill") => {
                let (off, len) = (n(1) as usize, n(2) as usize);
                fill(&mut region.bytes_mut()[off..off + len], off as u64, n(3));
                println!("ok");
            }
            _ => println!("?"),
        }
    }
}

struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    name: String,
    addr: u64,
}

impl Peer {
    fn start(protocol: &str) -> Peer {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "peer_process", "--ignored", "--nocapture", "--test-threads=1"])
            .env("KVFABRIC_TEST_PEER", protocol)
            .env("KVF_LOG_LEVEL", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the peer");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        // Owned by a Peer from here: a failure below kills and reaps it.
        let mut peer = Peer { child, stdin, stdout, name: String::new(), addr: 0 };
        let mut line = String::new();
        loop {
            line.clear();
            assert!(peer.stdout.read_line(&mut line).expect("peer output") > 0, "the peer exited before it was ready");
            // libtest may print "test peer_process ... " on the same line first.
            if let Some(rest) = line.find("PEER ").map(|at| &line[at + 5..]) {
                let mut w = rest.split_whitespace();
                peer.name = w.next().expect("name").to_string();
                peer.addr = w.next().expect("addr").parse().expect("addr");
                return peer;
            }
        }
    }

    fn ask(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").expect("to the peer");
        self.stdin.flush().expect("to the peer");
        let mut out = String::new();
        self.stdout.read_line(&mut out).expect("from the peer");
        out.trim().to_string()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn engine(protocol: &str) -> Engine {
    Engine::builder().protocol(protocol).setting("KVF_LOG_LEVEL", "error").build().expect("engine")
}

fn bytes_move_both_ways(protocol: &str) {
    let mut peer = Peer::start(protocol);
    let engine = engine(protocol);
    let segment = engine.open_segment(&peer.name).expect("open the peer");
    let buffers = engine.segment_buffers(&segment).expect("its buffers");
    assert_eq!(buffers.len(), 1);
    assert_eq!((buffers[0].addr, buffers[0].length), (peer.addr, PEER_SIZE as u64));
    let mut local = vec![0u8; 4 << 20];
    fill(&mut local[..2 << 20], 0, 11);
    let mut region = engine.register(&mut local).expect("register");

    // Blocking WRITE of 2 MiB, then sizes that are not block-aligned, in one batch.
    engine.transfer(&[Request::write(&region, 0, &segment, peer.addr, 2 << 20).unwrap()]).expect("write");
    assert_eq!(peer.ask(&format!("check 0 {} 11", 2 << 20)), (2 << 20).to_string());
    let batch = engine
        .submit(&[
            Request::write(&region, 100, &segment, peer.addr + 100, 4093).unwrap(),
            Request::write(&region, 1 << 20, &segment, peer.addr + (1 << 20), 65537).unwrap(),
        ])
        .expect("submit");
    let status = batch.wait(Some(Duration::from_secs(30))).expect("wait");
    assert_eq!(status.state, TaskState::Completed);
    assert_eq!(status.transferred_bytes, 4093 + 65537);
    assert_eq!(batch.task_status(1).unwrap().state, TaskState::Completed);
    assert!(batch.is_done().unwrap());
    drop(batch);

    // The peer fills a range; a polled READ brings it back.
    assert_eq!(peer.ask(&format!("fill {} {} 23", 3 << 20, 1 << 20)), "ok");
    {
        let batch = engine
            .submit(&[Request::read(&region, 2 << 20, &segment, peer.addr + (3 << 20), 1 << 20).unwrap()])
            .expect("submit a read");
        while batch.status().unwrap().state == TaskState::Pending {
            std::thread::yield_now();
        }
        batch.status().unwrap().result().expect("read");
    }
    assert_eq!(first_wrong(&region.bytes()[2 << 20..3 << 20], 3 << 20, 23), 1 << 20);

    #[cfg(feature = "async")]
    {
        assert_eq!(peer.ask(&format!("fill 0 {} 31", 1 << 20)), "ok");
        let mut batch =
            engine.submit(&[Request::read(&region, 0, &segment, peer.addr, 1 << 20).unwrap()]).expect("submit");
        let status = futures_executor::block_on(batch.completion()).expect("completion");
        assert_eq!(status.state, TaskState::Completed);
        drop(batch);
        assert_eq!(first_wrong(&region.bytes()[..1 << 20], 0, 31), 1 << 20);
    }
    peer.kill();
}

/// A READ from a stopped peer would run until its 30 s deadline: expire()
/// ends it now, and nothing of it lands in the buffer when the peer goes on.
/// libfabric reads FI_AV_REMOVE_CLEANUP (KVF_CLOSE_CONNECTIONS) once per
/// process, and the other tests of this binary may start it first: the
/// engine runs in a child process (the ignored test `expire_process`).
#[test]
fn expire_ends_a_hung_read_now_over_tcp() {
    let mut peer = Peer::start("tcp");
    let status = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "expire_process", "--ignored", "--nocapture", "--test-threads=1"])
        .env("KVFABRIC_TEST_EXPIRE", format!("{} {} {}", peer.name, peer.addr, peer.child.id()))
        .env("KVF_LOG_LEVEL", "error")
        .status()
        .expect("start the engine's process");
    assert!(status.success(), "the engine's process failed: {status}");
    peer.kill();
}

/// The engine side of `expire_ends_a_hung_read_now_over_tcp`.
#[test]
#[ignore = "the engine process of expire_ends_a_hung_read_now_over_tcp"]
fn expire_process() {
    let Ok(spec) = std::env::var("KVFABRIC_TEST_EXPIRE") else { return };
    let w: Vec<&str> = spec.split_whitespace().collect();
    let (name, addr, pid) = (w[0], w[1].parse::<u64>().expect("addr"), w[2]);
    let engine = Engine::builder()
        .protocol("tcp")
        .setting("KVF_LOG_LEVEL", "error")
        .setting("KVF_TRANSFER_TIMEOUT_MS", "30000")
        .build()
        .expect("engine");
    let segment = engine.open_segment(name).expect("open the peer");
    let mut local = vec![0u8; 1 << 20];
    let mut region = engine.register(&mut local).expect("register");
    engine.transfer(&[Request::read(&region, 0, &segment, addr, 4096).unwrap()]).expect("a first read");
    let signal = |sig: &str| {
        assert!(Command::new("kill").args([sig, pid]).status().expect("kill").success());
    };
    signal("-STOP");
    // Until every thread has stopped, the peer's progress thread may still serve a READ.
    let stopped = || {
        std::fs::read_dir(format!("/proc/{pid}/task")).expect("the peer's threads").flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .map(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['T', 't'])))
                .unwrap_or(true) // a thread that ended meanwhile
        })
    };
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !stopped() {
        assert!(std::time::Instant::now() < until, "the peer did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
    {
        let batch = engine.submit(&[Request::read(&region, 0, &segment, addr, 1 << 20).unwrap()]).expect("submit");
        assert_eq!(batch.wait(Some(Duration::from_millis(300))).expect("wait").state, TaskState::Pending);
        let started = std::time::Instant::now();
        let status = batch.expire().expect("expire");
        assert_eq!(status.state, TaskState::Timeout);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(matches!(status.result(), Err(Error::Timeout(_))), "{:?}", status.result());
    }
    region.bytes_mut().fill(0x77); // the buffer holds other data now
    signal("-CONT");
    std::thread::sleep(Duration::from_millis(500)); // the peer serves what it had been sent
    assert!(region.bytes().iter().all(|b| *b == 0x77), "bytes of the expired READ landed after expire()");
    engine.transfer(&[Request::read(&region, 0, &segment, addr, 4096).unwrap()]).expect("connects again");
}

fn errors_are_typed(protocol: &str) {
    let mut peer = Peer::start(protocol);
    let engine = Engine::builder()
        .protocol(protocol)
        .setting("KVF_LOG_LEVEL", "off")
        .setting("KVF_TRANSFER_TIMEOUT_MS", 2000)
        .setting("KVF_HANDSHAKE_TIMEOUT_MS", 2000)
        .build()
        .expect("engine");
    let mut local = vec![0u8; 1 << 20];
    let region = engine.register(&mut local).expect("register");

    // Unknown segment: nobody listens there.
    match engine.open_segment("127.0.0.1:1") {
        Err(Error::Network(m)) => assert!(m.contains("127.0.0.1:1"), "{m}"),
        other => panic!("open of an unknown segment: {other:?}"),
    }
    let segment = engine.open_segment(&peer.name).expect("open");
    // Out of range: locally (past the region), and at the peer (past its buffer).
    assert!(matches!(Request::write(&region, 1 << 20, &segment, peer.addr, 1), Err(Error::OutOfRange(_))));
    let past = Request::write(&region, 0, &segment, peer.addr + PEER_SIZE as u64 - 10, 4096).unwrap();
    match engine.transfer(&[past]) {
        Err(Error::OutOfRange(m)) => assert!(!m.is_empty()),
        other => panic!("a write past the peer's buffer: {other:?}"),
    }
    // Nothing moved by the refused request: the engine still works.
    engine.transfer(&[Request::write(&region, 0, &segment, peer.addr, 4096).unwrap()]).expect("after a refusal");
    // A bad setting names itself.
    match Engine::builder().setting("KVF_TRANSFER_TIMEOUT_MS", "soon").build() {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("KVF_TRANSFER_TIMEOUT_MS"), "{m}"),
        other => panic!("a bad setting: {other:?}"),
    }
    // A dead peer: its requests fail, typed, within their deadline.
    peer.kill();
    let started = std::time::Instant::now();
    let err = engine
        .transfer(&[Request::write(&region, 0, &segment, peer.addr, 1 << 20).unwrap()])
        .expect_err("a write to a dead peer");
    assert!(
        matches!(err, Error::Network(_) | Error::Fabric(_) | Error::Timeout(_) | Error::Unavailable(_)),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    engine.close();
    assert!(matches!(engine.open_segment(&peer.name), Err(Error::Closed(_))));
}

#[test]
fn bytes_move_both_ways_over_tcp() {
    bytes_move_both_ways("tcp");
}

#[test]
fn bytes_move_both_ways_over_shm() {
    bytes_move_both_ways("shm");
}

#[test]
fn errors_are_typed_over_tcp() {
    errors_are_typed("tcp");
}

#[test]
fn errors_are_typed_over_shm() {
    errors_are_typed("shm");
}
