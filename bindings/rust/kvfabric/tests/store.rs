//! The store across two processes: this test binary runs itself again as a
//! store node (the ignored test `store_node`, with KVFABRIC_TEST_NODE set to
//! its control address) holding a pool; the test is a client that puts
//! pages, gets them back byte for byte, asks which exist and removes them.
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

use kvfabric::{Engine, Error, HostBuffer, Piece, Store};

/// A port for the node's control service, below the ephemeral range (which
/// the engines' own listeners draw from), free when asked.
fn free_port() -> u16 {
    let seed = std::process::id() as u64 ^ std::time::SystemTime::now().elapsed().map_or(0, |d| d.as_nanos() as u64);
    (0..200u64)
        .map(|i| 20000 + ((seed.wrapping_mul(6364136223846793005).wrapping_add(i * 7919)) % 10000) as u16)
        .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port below 30000")
}

#[test]
#[ignore = "the store node process of the other tests"]
fn store_node() {
    let Ok(address) = std::env::var("KVFABRIC_TEST_NODE") else { return };
    let engine = Engine::builder().protocol("tcp").setting("KVF_LOG_LEVEL", "error").build().expect("node engine");
    let _store = Store::new(
        &engine,
        &[("KVF_STORE_POOL_BYTES", "64M"), ("KVF_STORE_LISTEN", &address), ("KVF_STORE_MEMBERS", &address)],
    )
    .expect("node store");
    println!("NODE ready");
    // Serves until the test closes stdin.
    for _ in std::io::stdin().lock().lines() {}
}

struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_node(address: &str) -> Node {
    let mut node = Node(
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "store_node", "--ignored", "--nocapture", "--test-threads=1"])
            .env("KVFABRIC_TEST_NODE", address)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the node"),
    );
    let mut out = BufReader::new(node.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.contains("NODE ready") {
        line.clear();
        assert!(out.read_line(&mut line).expect("node output") > 0, "the node exited before it was ready");
    }
    node
}

#[test]
fn pages_come_back_byte_for_byte() {
    let address = format!("127.0.0.1:{}", free_port());
    let _node = start_node(&address);
    let engine = Engine::builder().protocol("tcp").setting("KVF_LOG_LEVEL", "error").build().expect("engine");
    let store = Store::new(&engine, &[("KVF_STORE_MEMBERS", &address)]).expect("client");
    assert_eq!(store.name(), "", "a client has no control address");
    assert_eq!(store.members().expect("members"), vec![address.clone()]);

    // Eight pages of two pieces each (a layer's k and v), of odd sizes.
    let mut src = HostBuffer::new(1 << 20).unwrap();
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    let src = engine.register(&mut src).expect("register");
    let sizes: Vec<(usize, usize)> = (0..8).map(|i| (4096 * (i + 1) + i, 1000 + 7 * i)).collect();
    let mut at = 0;
    let mut pieces = Vec::new();
    for &(k, v) in &sizes {
        pieces.push([Piece::new(&src, at, k).unwrap(), Piece::new(&src, at + k, v).unwrap()]);
        at += k + v;
    }
    let keys: Vec<String> = (0..8).map(|i| format!("rust/page{i}")).collect();
    let puts: Vec<(&str, &[Piece<'_>])> = keys.iter().map(String::as_str).zip(pieces.iter().map(|p| &p[..])).collect();
    for r in store.put(&puts).expect("put") {
        r.expect("a page put");
    }

    let mut dst = HostBuffer::new(1 << 20).unwrap();
    let mut dst = engine.register(&mut dst).expect("register");
    {
        let out: Vec<[Piece<'_>; 1]> = (0..8).map(|i| [Piece::new(&dst, i * 65536, 65536).unwrap()]).collect();
        let mut gets: Vec<(&str, &[Piece<'_>])> =
            keys.iter().map(String::as_str).zip(out.iter().map(|p| &p[..])).collect();
        gets.push(("rust/absent", &out[0][..]));
        let got = store.get(&gets).expect("get");
        for (i, &(k, v)) in sizes.iter().enumerate() {
            assert_eq!(got[i].as_ref().copied(), Ok((k + v) as u64), "page {i}");
        }
        assert!(matches!(&got[8], Err(Error::NotFound(m)) if m.contains("rust/absent")), "{:?}", got[8]);
    }
    let mut at = 0;
    let bytes = dst.bytes().to_vec();
    for (i, &(k, v)) in sizes.iter().enumerate() {
        let want: Vec<u8> = (at..at + k + v).map(|j| (j * 31 % 251) as u8).collect();
        assert_eq!(&bytes[i * 65536..i * 65536 + k + v], &want[..], "page {i}'s bytes");
        at += k + v;
    }

    assert_eq!(store.exists(&["rust/page0", "rust/absent", "rust/page7"]).unwrap(), vec![true, false, true]);
    let removed = store.remove(&["rust/page0", "rust/absent"]).unwrap();
    assert!(removed[0].is_ok());
    assert!(matches!(removed[1], Err(Error::NotFound(_))));
    assert_eq!(store.exists(&["rust/page0"]).unwrap(), vec![false]);
    let stats = store.stats().unwrap();
    assert_eq!((stats.put_keys, stats.get_hits, stats.misses_absent, stats.members), (8, 8, 1, 1));
    // A piece past its region is refused before anything moves.
    assert!(matches!(Piece::new(&src, (1 << 20) - 10, 11), Err(Error::OutOfRange(_))));
}
