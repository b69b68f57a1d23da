//! The engine, its registered memory and the segments it opens.

use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::ptr::NonNull;

use kvfabric_sys as sys;

use crate::error::{check, Error, Result};
use crate::request::{Batch, Request};

/// Settings of a new [`Engine`]; from [`Engine::builder`].
#[derive(Debug, Clone, Default)]
pub struct EngineBuilder {
    local_server_name: Option<String>,
    metadata: Option<String>,
    protocol: Option<String>,
    nic_filter: Option<String>,
    settings: Vec<String>,
}

impl EngineBuilder {
    /// `host:port` the engine binds and advertises (peers open it by this
    /// name); port 0 picks a free one. Default `127.0.0.1:0`.
    pub fn local_server_name(mut self, name: impl Into<String>) -> Self {
        self.local_server_name = Some(name.into());
        self
    }

    /// Where peers find each other: `p2p` (default: they ask each other),
    /// `etcd://host:2379` or `http://host:port/metadata`.
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }

    /// `efa`, `tcp`, `shm`, `verbs`, `sockets` or `auto` (default: efa where
    /// the efa provider finds a device, else tcp).
    pub fn protocol(mut self, protocol: impl Into<String>) -> Self {
        self.protocol = Some(protocol.into());
        self
    }

    /// Comma-separated libfabric domain names to use (e.g.
    /// `rdmap79s0-rdm,rdmap80s0-rdm`); default: chosen automatically.
    pub fn nic_filter(mut self, devices: impl Into<String>) -> Self {
        self.nic_filter = Some(devices.into());
        self
    }

    /// Any kvfabric setting by its variable name (`KVF_TRANSFER_TIMEOUT_MS`,
    /// docs/settings.md), applied over the `KVF_*` environment. A value the
    /// setting does not allow fails [`EngineBuilder::build`], naming it.
    pub fn setting(mut self, name: &str, value: impl ToString) -> Self {
        self.settings.push(format!("{name}={}", value.to_string()));
        self
    }

    /// Starts the engine: opens its rails and its handshake server.
    pub fn build(self) -> Result<Engine> {
        let text = |s: Option<String>| -> Result<Option<CString>> {
            s.map(|v| CString::new(v).map_err(|_| Error::InvalidArgument("a setting holds a NUL byte".into())))
                .transpose()
        };
        let name = text(self.local_server_name)?;
        let metadata = text(self.metadata)?;
        let protocol = text(self.protocol)?;
        let nic_filter = text(self.nic_filter)?;
        let settings: Vec<CString> = self
            .settings
            .into_iter()
            .map(|s| CString::new(s).map_err(|_| Error::InvalidArgument("a setting holds a NUL byte".into())))
            .collect::<Result<_>>()?;
        let mut setting_ptrs: Vec<*const std::os::raw::c_char> = settings.iter().map(|s| s.as_ptr()).collect();
        setting_ptrs.push(std::ptr::null());
        let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let config = sys::kvf_config {
            local_server_name: ptr(&name),
            metadata: ptr(&metadata),
            protocol: ptr(&protocol),
            nic_filter: ptr(&nic_filter),
            settings: setting_ptrs.as_ptr(),
        };
        let mut out: *mut sys::kvf_engine = std::ptr::null_mut();
        // SAFETY: config's strings live until the call returns; out is written on success.
        check(unsafe { sys::kvf_engine_create(&config, &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| Error::Internal("kvf_engine_create returned no engine".into()))?;
        Ok(Engine { raw })
    }
}

/// One engine per process: it registers local memory, opens peers'
/// segments by name and moves bytes with one-sided READ and WRITE. Closed
/// and released when dropped (requests still in flight are abandoned; a
/// [`Batch`] cannot outlive its engine, so none is left waiting).
#[derive(Debug)]
pub struct Engine {
    raw: NonNull<sys::kvf_engine>,
}

// SAFETY: every kvf_* call may be made from any thread at once (include/kvfabric.h, Threads).
unsafe impl Send for Engine {}
// SAFETY: as above; &Engine only makes such calls.
unsafe impl Sync for Engine {}

impl Engine {
    /// A builder with the defaults: p2p metadata, protocol auto, `127.0.0.1:0`.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    pub(crate) fn raw(&self) -> *mut sys::kvf_engine {
        self.raw.as_ptr()
    }

    /// The name peers open this engine by (`host:port`).
    pub fn name(&self) -> String {
        // SAFETY: the name is owned by the engine and NUL-terminated; copied here.
        unsafe { CStr::from_ptr(sys::kvf_engine_name(self.raw())) }.to_string_lossy().into_owned()
    }

    /// Stops the engine: calls under way on other threads return first,
    /// later ones fail with [`Error::Closed`]. Idempotent; dropping closes too.
    pub fn close(&self) {
        // SAFETY: the handle stays valid until kvf_engine_destroy (in Drop).
        unsafe { sys::kvf_engine_close(self.raw()) }
    }

    /// Registers `bytes` for transfers and for peers' READ and WRITE. The
    /// returned [`Region`] borrows `bytes` and the engine, and unregisters
    /// when dropped. Location is detected (host memory: its NUMA node).
    pub fn register<'a>(&'a self, bytes: &'a mut [u8]) -> Result<Region<'a>> {
        self.register_at(bytes, None)
    }

    /// [`Engine::register`] with the memory's location given (`cpu:N`).
    pub fn register_at<'a>(&'a self, bytes: &'a mut [u8], location: Option<&str>) -> Result<Region<'a>> {
        let location = location
            .map(|l| CString::new(l).map_err(|_| Error::InvalidArgument("location holds a NUL byte".into())))
            .transpose()?;
        let addr = NonNull::new(bytes.as_mut_ptr()).ok_or_else(|| Error::InvalidArgument("no memory".into()))?;
        // SAFETY: [addr, +len) is memory this process owns, borrowed mutably
        // by the Region for as long as it stays registered.
        check(unsafe {
            sys::kvf_register_memory(
                self.raw(),
                addr.as_ptr().cast(),
                bytes.len(),
                location.as_ref().map_or(std::ptr::null(), |l| l.as_ptr()),
            )
        })?;
        Ok(Region { engine: self, addr, len: bytes.len(), _bytes: PhantomData })
    }

    /// Opens a peer's segment by its engine's name (`host:port`): fetches
    /// its descriptor and reaches it on every rail they share. The same name
    /// opened twice is the same segment.
    pub fn open_segment(&self, name: &str) -> Result<Segment<'_>> {
        let name = CString::new(name).map_err(|_| Error::InvalidArgument("segment name holds a NUL byte".into()))?;
        let mut handle: sys::kvf_segment = -1;
        // SAFETY: name lives through the call; handle is written on success.
        check(unsafe { sys::kvf_open_segment(self.raw(), name.as_ptr(), &mut handle) })?;
        Ok(Segment { handle, engine: self as *const Engine as usize, _engine: PhantomData })
    }

    /// Forgets an opened segment; its requests must have ended.
    pub fn close_segment(&self, segment: Segment<'_>) -> Result<()> {
        // SAFETY: a plain handle; the engine checks it.
        check(unsafe { sys::kvf_close_segment(self.raw(), segment.handle) })
    }

    /// The buffers the peer registered, as it published them now.
    pub fn segment_buffers(&self, segment: &Segment<'_>) -> Result<Vec<RemoteBuffer>> {
        let mut count = 0usize;
        // SAFETY: capacity 0 asks for the count only.
        check(unsafe { sys::kvf_segment_buffers(self.raw(), segment.handle, std::ptr::null_mut(), 0, &mut count) })?;
        let mut out = vec![sys::kvf_remote_buffer::default(); count];
        // SAFETY: out holds `count` entries.
        check(unsafe {
            sys::kvf_segment_buffers(self.raw(), segment.handle, out.as_mut_ptr(), out.len(), &mut count)
        })?;
        out.truncate(count);
        Ok(out.into_iter().map(|b| RemoteBuffer { addr: b.addr, length: b.length }).collect())
    }

    /// Opens `name` and reaches it on every rail now, so the first transfer
    /// pays no connection set-up. Idempotent.
    pub fn warmup(&self, name: &str) -> Result<()> {
        let name = CString::new(name).map_err(|_| Error::InvalidArgument("segment name holds a NUL byte".into()))?;
        // SAFETY: name lives through the call.
        check(unsafe { sys::kvf_warmup(self.raw(), name.as_ptr()) })
    }

    /// Submits `requests` and waits until every one ended; the first
    /// failure is returned.
    pub fn transfer(&self, requests: &[Request<'_>]) -> Result<()> {
        let raw = self.raw_requests(requests)?;
        // SAFETY: every request's local memory is borrowed by `requests` through this call.
        check(unsafe { sys::kvf_transfer(self.raw(), raw.as_ptr(), raw.len()) })
    }

    /// Submits `requests` as one batch and returns at once; the [`Batch`]
    /// is polled, waited for, or awaited (feature `async`). Every request is
    /// checked before any is posted: on error nothing was submitted.
    pub fn submit<'r>(&'r self, requests: &[Request<'r>]) -> Result<Batch<'r>> {
        Batch::submit(self, requests)
    }
}

impl Engine {
    /// The C requests of `requests`, refused when one belongs to another engine.
    pub(crate) fn raw_requests(&self, requests: &[Request<'_>]) -> Result<Vec<sys::kvf_request>> {
        let me = self as *const Engine as usize;
        requests
            .iter()
            .enumerate()
            .map(|(i, r)| {
                if r.engine_id() == me {
                    Ok(r.raw())
                } else {
                    Err(Error::InvalidArgument(format!(
                        "request {i}: its region and segment belong to another engine than {}",
                        self.name()
                    )))
                }
            })
            .collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: no Region, Segment or Batch outlives the engine (they borrow it).
        unsafe { sys::kvf_engine_destroy(self.raw()) }
    }
}

/// Registered local memory. It borrows the engine and the bytes for as long
/// as it lives and unregisters when dropped. Its bytes are reachable through
/// [`Region::bytes`] and [`Region::bytes_mut`], which need `&mut self`: no
/// [`Batch`] of this process can be using the region then.
///
/// Peers may READ and WRITE a registered region at any time: that is what
/// registering is for. As with memory shared with another process, when
/// their bytes are complete is for the application's protocol to say (a
/// notification after the write, for example), not for the borrow checker.
#[derive(Debug)]
pub struct Region<'a> {
    engine: &'a Engine,
    addr: NonNull<u8>,
    len: usize,
    _bytes: PhantomData<&'a mut [u8]>,
}

// SAFETY: the region is a registration of memory it borrows mutably; the
// engine is Sync, and the bytes are only reached through &mut self.
unsafe impl Send for Region<'_> {}
// SAFETY: &Region only lends its address to requests.
unsafe impl Sync for Region<'_> {}

impl<'a> Region<'a> {
    /// The registered bytes, read.
    pub fn bytes(&mut self) -> &[u8] {
        // SAFETY: the region borrows [addr, +len) mutably, and &mut self
        // means no request (which borrows &self) is in flight.
        unsafe { std::slice::from_raw_parts(self.addr.as_ptr(), self.len) }
    }

    /// The registered bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in bytes().
        unsafe { std::slice::from_raw_parts_mut(self.addr.as_ptr(), self.len) }
    }

    /// The address of the first byte, as this process sees it (what a peer
    /// gives as `remote_addr` when it targets this region).
    pub fn addr(&self) -> u64 {
        self.addr.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes (never: registration refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn engine_id(&self) -> usize {
        self.engine as *const Engine as usize
    }

    pub(crate) fn ptr_at(&self, offset: usize) -> *mut u8 {
        // SAFETY: callers checked offset <= len.
        unsafe { self.addr.as_ptr().add(offset) }
    }
}

impl Drop for Region<'_> {
    fn drop(&mut self) {
        // SAFETY: registered by this region; no batch uses it (they borrow it).
        let rc = unsafe { sys::kvf_unregister_memory(self.engine.raw(), self.addr.as_ptr().cast()) };
        // A closed engine has unregistered everything already.
        debug_assert!(rc == sys::KVF_OK || rc == sys::KVF_ECLOSED, "unregister failed: {rc}");
    }
}

/// A peer's segment opened by [`Engine::open_segment`]; valid for its
/// engine's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment<'e> {
    pub(crate) handle: sys::kvf_segment,
    pub(crate) engine: usize, // which engine opened it
    _engine: PhantomData<&'e Engine>,
}

/// A buffer a peer registered: its address in the peer and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuffer {
    /// The buffer's address in the peer (a request's `remote_addr`).
    pub addr: u64,
    /// Its length in bytes.
    pub length: u64,
}
