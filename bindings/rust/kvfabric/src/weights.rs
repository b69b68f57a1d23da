//! RL weight sync (docs/weights.md): member 0 (a trainer rank) sends a
//! version of named tensors; the others (rollout ranks) receive them in the
//! same order, each bucket checked before any of its tensors is handed out
//! and relayed to the receivers behind them.
//!
//! ```no_run
//! use kvfabric::{Engine, SyncOptions, Tensor, WeightSync};
//!
//! # fn main() -> kvfabric::Result<()> {
//! # let (descriptions, me, step): (Vec<String>, usize, u64) = (vec![], 0, 1);
//! let engine = Engine::builder().protocol("tcp").local_server_name("10.0.0.5:0").build()?;
//! let mut sync = WeightSync::new(&engine, &SyncOptions::default())?;
//! let mine = sync.describe()?; // gathered with every member's, the sender's first
//! sync.connect(&descriptions, me)?;
//! if me == 0 {
//!     let weight = vec![0u8; 4096];
//!     sync.begin_send(step)?;
//!     sync.send(&Tensor { name: "lm_head.weight", dtype: "bfloat16", shape: &[32, 64], data: &weight })?;
//!     sync.end_send()?;
//! } else {
//!     sync.begin_receive(step)?;
//!     while let Some(t) = sync.next_tensor()? {
//!         println!("{} {:?}: {} bytes", t.name, t.shape, t.data.len()); // valid until the next call
//!     }
//! }
//! # drop(mine); Ok(()) }
//! ```

use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr::NonNull;

use kvfabric_sys as sys;

use crate::engine::Engine;
use crate::error::{check, Error, Result};

/// A member's options. Every member of a sync must take the same
/// `bucket_bytes`, `manifest_bytes` and `slots`.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// Tensor bytes per bucket.
    pub bucket_bytes: u64,
    /// Room for a bucket's manifest (its tensors' names, dtypes, shapes).
    pub manifest_bytes: u64,
    /// Buckets in flight to each receiver.
    pub slots: i32,
    /// Longest wait for a bucket or a credit, in milliseconds.
    pub timeout_ms: i64,
    /// This member's host for the relay plan ("": the engine name's).
    pub host: String,
    /// This member's rails for the relay plan (0: the engine's).
    pub rails: i32,
}

impl Default for SyncOptions {
    fn default() -> Self {
        let mut o = sys::kvf_weights_options::default();
        // SAFETY: an out-parameter the call fills.
        unsafe { sys::kvf_weights_options_init(&mut o) };
        SyncOptions {
            bucket_bytes: o.bucket_bytes,
            manifest_bytes: o.manifest_bytes,
            slots: o.slots,
            timeout_ms: o.timeout_ms,
            host: String::new(),
            rails: o.rails,
        }
    }
}

/// A tensor: sent (its bytes are read during [`WeightSync::send`]), or
/// received (borrowed from the sync until its next call).
#[derive(Debug, Clone, Copy)]
pub struct Tensor<'a> {
    /// Its name, as the sender gives it.
    pub name: &'a str,
    /// "bfloat16", "float32", "int8", ... as the sender names it.
    pub dtype: &'a str,
    /// Its dimensions.
    pub shape: &'a [i64],
    /// Its bytes.
    pub data: &'a [u8],
}

/// One member of a weight sync over an engine, which it borrows: it cannot
/// outlive it. Its slots are unregistered when it is dropped.
#[derive(Debug)]
pub struct WeightSync<'e> {
    raw: NonNull<sys::kvf_weights>,
    _engine: &'e Engine,
}

// SAFETY: one thread at a time drives a kvf_weights (include/kvfabric.h):
// it may move to another thread, and &mut self keeps calls apart.
unsafe impl Send for WeightSync<'_> {}

fn c_string(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::InvalidArgument(format!("{what} '{s}' holds a NUL byte")))
}

impl<'e> WeightSync<'e> {
    /// A member over `engine`, registering its slots with it.
    pub fn new(engine: &'e Engine, options: &SyncOptions) -> Result<Self> {
        let host = c_string("host", &options.host)?;
        let o = sys::kvf_weights_options {
            bucket_bytes: options.bucket_bytes,
            manifest_bytes: options.manifest_bytes,
            slots: options.slots,
            timeout_ms: options.timeout_ms,
            host: host.as_ptr(),
            rails: options.rails,
        };
        let mut out: *mut sys::kvf_weights = std::ptr::null_mut();
        // SAFETY: the options and their host live through the call; out is written on success.
        check(unsafe { sys::kvf_weights_create(engine.raw(), &o, &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| Error::Internal("kvf_weights_create returned no sync".into()))?;
        Ok(WeightSync { raw, _engine: engine })
    }

    /// What the other members need of this one (JSON), to give to [`WeightSync::connect`].
    pub fn describe(&self) -> Result<String> {
        let mut size = 0usize;
        // SAFETY: capacity 0 sizes the answer.
        check(unsafe { sys::kvf_weights_describe(self.raw.as_ptr(), std::ptr::null_mut(), 0, &mut size) })?;
        let mut text = vec![0u8; size];
        // SAFETY: text holds `size` bytes.
        check(unsafe { sys::kvf_weights_describe(self.raw.as_ptr(), text.as_mut_ptr().cast(), size, &mut size) })?;
        text.truncate(size.saturating_sub(1));
        String::from_utf8(text).map_err(|_| Error::Internal("a description that is not UTF-8".into()))
    }

    /// Every member's description, the sender's first; `me` is this
    /// member's index. After a version that failed, every member connects
    /// again before the next.
    pub fn connect<S: AsRef<str>>(&mut self, members: &[S], me: usize) -> Result<()> {
        let owned = members.iter().map(|m| c_string("description", m.as_ref())).collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*const c_char> = owned.iter().map(|m| m.as_ptr()).collect();
        let me = i32::try_from(me).map_err(|_| Error::InvalidArgument(format!("member {me}")))?;
        // SAFETY: ptrs.len() descriptions, alive through the call.
        check(unsafe { sys::kvf_weights_connect(self.raw.as_ptr(), ptrs.as_ptr(), ptrs.len(), me) })
    }

    /// The sender's side of `version`.
    pub fn begin_send(&mut self, version: u64) -> Result<()> {
        // SAFETY: this sync's handle.
        check(unsafe { sys::kvf_weights_begin_send(self.raw.as_ptr(), version) })
    }

    /// Packs `tensor` (its bytes are read before this returns).
    pub fn send(&mut self, tensor: &Tensor<'_>) -> Result<()> {
        let name = c_string("name", tensor.name)?;
        let dtype = c_string("dtype", tensor.dtype)?;
        let t = sys::kvf_tensor {
            name: name.as_ptr(),
            dtype: dtype.as_ptr(),
            shape: tensor.shape.as_ptr(),
            ndim: tensor.shape.len(),
            data: tensor.data.as_ptr().cast(),
            bytes: tensor.data.len() as u64,
        };
        // SAFETY: the tensor's strings and slices live through the call.
        check(unsafe { sys::kvf_weights_send(self.raw.as_ptr(), &t) })
    }

    /// Sends the last bucket; returns once the receivers it writes to have taken every bucket.
    pub fn end_send(&mut self) -> Result<()> {
        // SAFETY: this sync's handle.
        check(unsafe { sys::kvf_weights_end_send(self.raw.as_ptr()) })
    }

    /// A receiver's side of `version`: only its buckets are handed out.
    pub fn begin_receive(&mut self, version: u64) -> Result<()> {
        // SAFETY: this sync's handle.
        check(unsafe { sys::kvf_weights_begin_receive(self.raw.as_ptr(), version) })
    }

    /// The next tensor in the sender's order, or `None` once the version is
    /// complete. It borrows the sync: copy what you keep before the next call.
    pub fn next_tensor(&mut self) -> Result<Option<Tensor<'_>>> {
        let mut t = sys::kvf_tensor::default();
        let mut done = 0i32;
        // SAFETY: out-parameters the call fills.
        check(unsafe { sys::kvf_weights_next(self.raw.as_ptr(), &mut t, &mut done) })?;
        if done != 0 {
            return Ok(None);
        }
        // SAFETY: the C API keeps the name, dtype, shape and bytes valid
        // until this sync's next call, which &mut self keeps out while the
        // tensor lives.
        unsafe {
            let text = |p: *const c_char| CStr::from_ptr(p).to_str().map_err(|_| Error::Internal("not UTF-8".into()));
            let shape = if t.ndim == 0 { &[][..] } else { std::slice::from_raw_parts(t.shape, t.ndim) };
            let data = if t.bytes == 0 { &[][..] } else { std::slice::from_raw_parts(t.data.cast::<u8>(), t.bytes as usize) };
            Ok(Some(Tensor { name: text(t.name)?, dtype: text(t.dtype)?, shape, data }))
        }
    }
}

impl Drop for WeightSync<'_> {
    fn drop(&mut self) {
        // SAFETY: this sync's handle; nothing uses it after this.
        unsafe { sys::kvf_weights_destroy(self.raw.as_ptr()) }
    }
}
