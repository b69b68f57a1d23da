//! The weight sync from Rust: a sender and two receivers, each a thread
//! with its own engine, over tcp and shm; descriptions exchanged through
//! channels; two versions of tensors of mixed dtypes and sizes (one larger
//! than a bucket, an empty one), every received tensor's name, dtype, shape
//! and bytes checked.
use std::sync::{mpsc, Arc, Barrier};

use kvfabric::{Engine, Error, SyncOptions, Tensor, WeightSync};

const MODEL: &[(&str, &str, [i64; 2], usize)] = &[
    ("embed", "bfloat16", [600, 256], 2),
    ("layer.0.norm", "float32", [257, 1], 4),
    ("layer.0.qkv", "bfloat16", [96, 160], 2),
    ("empty", "float32", [0, 1], 4),
    ("head", "bfloat16", [400, 256], 2),
];

fn bytes_of(version: u64, i: usize) -> Vec<u8> {
    let (_, _, shape, size) = MODEL[i];
    let n = (shape[0] * shape[1]) as usize * size;
    (0..n).map(|b| (b as u64 * 131 + version * 17 + i as u64 * 7) as u8).collect()
}

fn options() -> SyncOptions {
    let defaults = SyncOptions::default();
    assert_eq!((defaults.bucket_bytes, defaults.slots), (64 << 20, 2));
    SyncOptions { bucket_bytes: 256 << 10, manifest_bytes: 16 << 10, timeout_ms: 10_000, ..defaults }
}

// The members are engines of one process: each closes its engine only once
// all are done (`done`), as separate processes would not need to. libfabric
// 1.17's shm provider can crash in a progress thread's fi_cq_read when an
// engine of the same process closes while an operation to it completes.
fn member(
    protocol: &str,
    me: usize,
    up: mpsc::Sender<(usize, String)>,
    down: mpsc::Receiver<Vec<String>>,
    done: Arc<Barrier>,
) -> usize {
    let engine = Engine::builder().protocol(protocol).setting("KVF_LOG_LEVEL", "error").build().expect("engine");
    let mut sync = WeightSync::new(&engine, &options()).expect("sync");
    up.send((me, sync.describe().expect("describe"))).unwrap();
    let members = down.recv().unwrap();
    sync.connect(&members, me).expect("connect");
    let mut checked = 0;
    for version in 1..=2u64 {
        if me == 0 {
            sync.begin_send(version).unwrap();
            for (i, &(name, dtype, shape, _)) in MODEL.iter().enumerate() {
                let data = bytes_of(version, i);
                sync.send(&Tensor { name, dtype, shape: &shape, data: &data }).unwrap();
            }
            sync.end_send().unwrap();
            continue;
        }
        assert!(matches!(sync.begin_send(version), Err(Error::InvalidArgument(_))), "a receiver cannot send");
        sync.begin_receive(version).unwrap();
        let mut i = 0;
        while let Some(t) = sync.next_tensor().unwrap() {
            let (name, dtype, shape, _) = MODEL[i];
            assert_eq!((t.name, t.dtype, t.shape), (name, dtype, &shape[..]), "tensor {i} of version {version}");
            assert!(t.data == bytes_of(version, i).as_slice(), "tensor {i}'s bytes, version {version}");
            i += 1;
            checked += 1;
        }
        assert_eq!(i, MODEL.len());
    }
    done.wait();
    checked
}

fn sync_over(protocol: &'static str) {
    let (up, descriptions) = mpsc::channel();
    let mut downs = Vec::new();
    let mut threads = Vec::new();
    let done = Arc::new(Barrier::new(3));
    for me in 0..3 {
        let (down, from_parent) = mpsc::channel();
        downs.push(down);
        let up = up.clone();
        let done = done.clone();
        threads.push(std::thread::spawn(move || member(protocol, me, up, from_parent, done)));
    }
    let mut members = vec![String::new(); 3];
    for _ in 0..3 {
        let (me, d) = descriptions.recv().unwrap();
        members[me] = d;
    }
    for down in &downs {
        down.send(members.clone()).unwrap();
    }
    let checked: Vec<usize> = threads.into_iter().map(|t| t.join().expect("a member panicked")).collect();
    assert_eq!(checked, vec![0, 2 * MODEL.len(), 2 * MODEL.len()]);
}

#[test]
fn every_receiver_gets_every_tensor_over_tcp() {
    sync_over("tcp");
}

#[test]
fn every_receiver_gets_every_tensor_over_shm() {
    sync_over("shm");
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let engine = Engine::builder().protocol("tcp").setting("KVF_LOG_LEVEL", "error").build().expect("engine");
    let mut sync = WeightSync::new(&engine, &options()).expect("sync");
    let me = sync.describe().unwrap();
    assert!(matches!(sync.connect(&[me.as_str()], 3), Err(Error::InvalidArgument(_))));
    assert!(matches!(sync.connect(&["not a description"], 0), Err(Error::InvalidArgument(_))));
    sync.connect(&[me.as_str()], 0).expect("a sender alone");
    assert!(matches!(sync.begin_receive(1), Err(Error::InvalidArgument(_))), "the sender does not receive");
    sync.begin_send(1).unwrap();
    let nul = Tensor { name: "a\0b", dtype: "int8", shape: &[1], data: &[1] };
    assert!(matches!(sync.send(&nul), Err(Error::InvalidArgument(_))));
    sync.send(&Tensor { name: "ok", dtype: "int8", shape: &[1], data: &[1] }).unwrap();
    sync.end_send().expect("no receivers: the version ends at once");
}
