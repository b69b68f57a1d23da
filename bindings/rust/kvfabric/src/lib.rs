//! kvfabric: move registered memory between processes and hosts with
//! one-sided READ and WRITE over libfabric (AWS EFA, tcp, shm, verbs), the
//! transfer engine of disaggregated LLM serving (KV caches from prefill to
//! decode, weights to inference engines), with a KV-cache [`Store`] and an
//! RL [`WeightSync`] over it.
//!
//! ```no_run
//! use kvfabric::{Engine, Request};
//!
//! # fn main() -> kvfabric::Result<()> {
//! let engine = Engine::builder().protocol("tcp").local_server_name("10.0.0.2:0").build()?;
//! let mut buf = vec![0u8; 1 << 20];
//! let region = engine.register(&mut buf)?;           // unregistered when dropped
//! let peer = engine.open_segment("10.0.0.1:15000")?;  // the peer's engine name
//! let remote = engine.segment_buffers(&peer)?[0].addr;
//! engine.transfer(&[Request::write(&region, 0, &peer, remote, 1 << 20)?])?;
//! # Ok(()) }
//! ```
//!
//! Memory is registered as a [`Region`], which borrows both the engine and
//! the bytes: it cannot outlive either, and it unregisters when dropped.
//! Requests borrow their regions, and a [`Batch`] borrows its requests'
//! regions until every request has ended (dropping a batch waits for that),
//! so no byte is touched by the engine after its region is gone, and the
//! region's bytes ([`Region::bytes`]) are reachable only when no batch uses
//! them. Errors are [`Error`] variants carrying the engine's message.
//!
//! What the compiler refuses, so that no byte is used after it is
//! unregistered and no region outlives its engine:
//!
//! ```compile_fail,E0597
//! # use kvfabric::Engine;
//! # fn main() -> kvfabric::Result<()> {
//! let engine = Engine::builder().build()?;
//! let region = {
//!     let mut buf = vec![0u8; 4096];
//!     engine.register(&mut buf)?
//! }; // `buf` is freed here while the region still holds it
//! # drop(region); Ok(()) }
//! ```
//!
//! ```compile_fail,E0597
//! # use kvfabric::Engine;
//! # fn main() -> kvfabric::Result<()> {
//! let mut buf = vec![0u8; 4096];
//! let region = {
//!     let engine = Engine::builder().build()?;
//!     engine.register(&mut buf)?
//! }; // the engine is dropped here while the region still needs it
//! # drop(region); Ok(()) }
//! ```
//!
//! ```compile_fail,E0502
//! # use kvfabric::{Engine, Request};
//! # fn main() -> kvfabric::Result<()> {
//! let engine = Engine::builder().build()?;
//! let mut buf = vec![0u8; 4096];
//! let mut region = engine.register(&mut buf)?;
//! let peer = engine.open_segment("127.0.0.1:15000")?;
//! let batch = engine.submit(&[Request::write(&region, 0, &peer, 0, 4096)?])?;
//! region.bytes_mut()[0] = 1; // the batch may still be reading these bytes
//! batch.wait(None)?;
//! # Ok(()) }
//! ```
//!
//! ```compile_fail,E0499
//! # use kvfabric::Engine;
//! # fn main() -> kvfabric::Result<()> {
//! let engine = Engine::builder().build()?;
//! let mut buf = vec![0u8; 4096];
//! let region = engine.register(&mut buf)?;
//! buf[0] = 1; // registered memory is reached through its region only
//! # drop(region); Ok(()) }
//! ```
//!
//! Threads: an [`Engine`] is `Send` and `Sync` (every call of the C API may
//! be made from any thread at once); share it by reference or in an `Arc`.
//!
//! Linking: `kvfabric-sys` finds `libkvfabric.so` (`KVFABRIC_LIB_DIR`, or
//! pkg-config's `kvfabric`); at run time the loader must find it too
//! (`LD_LIBRARY_PATH`, or an installed library).
#![deny(missing_docs)]

mod buffer;
mod engine;
mod error;
mod request;
mod store;
mod weights;

pub use buffer::{HostBuffer, HUGE_PAGE};
pub use engine::{Engine, EngineBuilder, Region, RemoteBuffer, Segment};
pub use error::{Error, Result};
pub use request::{Batch, Op, Request, TaskState, TransferStatus};
pub use store::{Piece, Store, StoreStats};
pub use weights::{SyncOptions, Tensor, WeightSync};
#[cfg(feature = "async")]
pub use request::Completion;
