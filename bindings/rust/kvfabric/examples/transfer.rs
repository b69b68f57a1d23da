//! Two processes moving bytes: a target that registers a buffer and
//! serves it, and an initiator that writes to it or reads from it, the way
//! kvfabric-bench does (threads x batch x block, for a duration), then
//! checks every byte and prints its throughput as JSON.
//!
//! ```sh
//! # terminal 1
//! cargo run --example transfer -- target --protocol tcp
//! # terminal 2 (the segment the target printed)
//! cargo run --release --example transfer -- initiator --protocol tcp --segment 127.0.0.1:PORT --op write
//! ```
use std::io::BufRead;
use std::time::{Duration, Instant};

use clap::{value_parser, Arg, ArgAction, Command};
use kvfabric::{Engine, HostBuffer, Request};

/// The byte at position `i` of pattern `seed` (the same in both processes).
fn pattern(i: u64, seed: u64) -> u8 {
    (i.wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(40503)) >> 7) as u8
}

fn fill(bytes: &mut [u8], start: u64, seed: u64) {
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = pattern(start + i as u64, seed);
    }
}

fn first_wrong(bytes: &[u8], start: u64, seed: u64) -> Option<usize> {
    bytes.iter().enumerate().position(|(i, b)| *b != pattern(start + i as u64, seed))
}

fn engine(args: &clap::ArgMatches) -> kvfabric::Result<Engine> {
    Engine::builder()
        .protocol(args.get_one::<String>("protocol").expect("defaulted").as_str())
        .local_server_name(args.get_one::<String>("listen").expect("defaulted").as_str())
        .build()
}

/// Serves a buffer until stdin closes; answers "check OFF LEN SEED" (the
/// index of the first wrong byte, or LEN) and "fill OFF LEN SEED" lines.
fn target(args: &clap::ArgMatches) -> kvfabric::Result<()> {
    let size = *args.get_one::<usize>("size").expect("defaulted");
    let engine = engine(args)?;
    let mut buf = HostBuffer::new(size)?;
    let mut region = engine.register(&mut buf)?;
    println!("segment={} addr={} size={}", engine.name(), region.addr(), size);
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| kvfabric::Error::Internal(e.to_string()))?;
        let words: Vec<u64> = line.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
        match (line.split_whitespace().next(), words.as_slice()) {
            (Some("check"), [off, len, seed]) => {
                let bytes = &region.bytes()[*off as usize..(*off + *len) as usize];
                println!("{}", first_wrong(bytes, *off, *seed).unwrap_or(*len as usize));
            }
            (Some("fill"), [off, len, seed]) => {
                fill(&mut region.bytes_mut()[*off as usize..(*off + *len) as usize], *off, *seed);
                println!("ok");
            }
            _ => println!("? {line}"),
        }
    }
    Ok(())
}

/// Moves blocks to or from the target for a duration, then verifies.
fn initiator(args: &clap::ArgMatches) -> kvfabric::Result<()> {
    let block = *args.get_one::<usize>("block").expect("defaulted");
    let batch = *args.get_one::<usize>("batch").expect("defaulted");
    let threads = *args.get_one::<usize>("threads").expect("defaulted");
    let duration = Duration::from_secs_f64(*args.get_one::<f64>("duration").expect("defaulted"));
    let write = args.get_one::<String>("op").expect("defaulted") == "write";
    let engine = engine(args)?;
    let segment = engine.open_segment(args.get_one::<String>("segment").expect("required"))?;
    let remote = engine.segment_buffers(&segment)?;
    let remote = remote.first().ok_or_else(|| kvfabric::Error::NotFound("the target registered no buffer".into()))?;
    let per_thread = block * batch;
    if (per_thread * threads) as u64 > remote.length {
        return Err(kvfabric::Error::OutOfRange(format!(
            "{threads} threads x {batch} x {block} bytes exceed the target's {} bytes",
            remote.length
        )));
    }
    // Aligned to huge pages, as kvfabric-bench's buffers are.
    let mut bufs = (0..threads).map(|_| HostBuffer::new(per_thread)).collect::<kvfabric::Result<Vec<_>>>()?;
    let seed = 7;
    for (t, b) in bufs.iter_mut().enumerate() {
        fill(b, (t * per_thread) as u64, seed);
    }
    let started = Instant::now();
    let moved: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = bufs
            .iter_mut()
            .enumerate()
            .map(|(t, buf)| {
                let (engine, segment) = (&engine, &segment);
                scope.spawn(move || -> kvfabric::Result<u64> {
                    let region = engine.register(buf)?;
                    let base = remote.addr + (t * per_thread) as u64;
                    let requests = (0..batch)
                        .map(|i| {
                            let (off, at) = (i * block, base + (i * block) as u64);
                            if write {
                                Request::write(&region, off, segment, at, block)
                            } else {
                                Request::read(&region, off, segment, at, block)
                            }
                        })
                        .collect::<kvfabric::Result<Vec<_>>>()?;
                    let mut bytes = 0u64;
                    while started.elapsed() < duration {
                        engine.submit(&requests)?.wait(None)?.result()?;
                        bytes += per_thread as u64;
                    }
                    Ok(bytes)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker panicked")).sum::<kvfabric::Result<u64>>()
    })?;
    let secs = started.elapsed().as_secs_f64();
    // Verify: what the target holds (after a write) or what came back (after a read).
    let verify = if write {
        let mut all = HostBuffer::new(per_thread * threads)?;
        let region = engine.register(&mut all)?;
        engine.transfer(&[Request::read(&region, 0, &segment, remote.addr, per_thread * threads)?])?;
        drop(region);
        first_wrong(&all, 0, seed).map_or("verified".to_string(), |i| format!("byte {i} differs"))
    } else {
        "read (the target's own bytes)".to_string()
    };
    println!(
        "{{\"tool\": \"kvfabric-rust-transfer\", \"operation\": \"{}\", \"block_size\": {block}, \"batch_size\": {batch}, \
         \"threads\": {threads}, \"duration_s\": {secs:.3}, \"bytes\": {moved}, \"bytes_per_s\": {:.1}, \"verify\": \"{verify}\"}}",
        if write { "write" } else { "read" },
        moved as f64 / secs
    );
    if verify.starts_with("byte") {
        std::process::exit(3);
    }
    Ok(())
}

fn main() {
    let common = [
        Arg::new("protocol").long("protocol").default_value("auto").help("efa, tcp, shm, verbs or auto"),
        Arg::new("listen").long("listen").default_value("127.0.0.1:0").help("this engine's host:port"),
    ];
    let cli = Command::new("transfer")
        .about("kvfabric between two processes: a target serving a buffer, an initiator moving blocks")
        .subcommand_required(true)
        .subcommand(
            Command::new("target").args(common.clone()).arg(
                Arg::new("size").long("size").default_value("268435456").value_parser(value_parser!(usize)),
            ),
        )
        .subcommand(
            Command::new("initiator")
                .args(common)
                .arg(Arg::new("segment").long("segment").required(true).help("the target's segment (host:port)"))
                .arg(Arg::new("op").long("op").default_value("write").value_parser(["write", "read"]))
                .arg(Arg::new("block").long("block").default_value("1048576").value_parser(value_parser!(usize)))
                .arg(Arg::new("batch").long("batch").default_value("32").value_parser(value_parser!(usize)))
                .arg(Arg::new("threads").long("threads").default_value("2").value_parser(value_parser!(usize)))
                .arg(Arg::new("duration").long("duration").default_value("3").value_parser(value_parser!(f64)))
                .arg(Arg::new("verbose").long("verbose").action(ArgAction::SetTrue)),
        );
    let args = cli.get_matches();
    let result = match args.subcommand() {
        Some(("target", a)) => target(a),
        Some(("initiator", a)) => initiator(a),
        _ => unreachable!("subcommand_required"),
    };
    if let Err(e) = result {
        eprintln!("transfer: {e}");
        std::process::exit(1);
    }
}
