//! The KV-cache store over an engine (docs/store.md): pages under keys,
//! spread over the members' pools, put and got in batches.

use std::ffi::{CStr, CString};
use std::ptr::NonNull;

use kvfabric_sys as sys;

use crate::engine::{Engine, Region};
use crate::error::{check, Error, Result};

/// Part of a page: a range of a registered [`Region`].
#[derive(Debug, Clone, Copy)]
pub struct Piece<'r> {
    region: &'r Region<'r>,
    offset: usize,
    len: usize,
}

impl<'r> Piece<'r> {
    /// `len` bytes of `region` from `offset`; [`Error::OutOfRange`] when
    /// the range leaves the region.
    pub fn new(region: &'r Region<'r>, offset: usize, len: usize) -> Result<Self> {
        if offset.checked_add(len).map_or(true, |end| end > region.len()) {
            return Err(Error::OutOfRange(format!(
                "piece [{offset}, +{len}) leaves the region of {} bytes",
                region.len()
            )));
        }
        Ok(Piece { region, offset, len })
    }

    /// The whole region.
    pub fn all(region: &'r Region<'r>) -> Self {
        Piece { region, offset: 0, len: region.len() }
    }

    fn raw(&self) -> sys::kvf_store_buffer {
        sys::kvf_store_buffer { addr: self.region.ptr_at(self.offset).cast(), length: self.len as u64 }
    }
}

/// The store's counters (this process's calls, this node's pool): one field
/// per row of `KVF_STORE_STATS` (`include/kvfabric/store_stats.h` says
/// what each counts).
pub type StoreStats = sys::kvf_store_stats;

/// A store node (with a pool: `KVF_STORE_POOL_BYTES`) or client over an
/// engine, which it borrows: it cannot outlive it. Closed when dropped.
#[derive(Debug)]
pub struct Store<'e> {
    raw: NonNull<sys::kvf_store>,
    _engine: &'e Engine,
}

// SAFETY: every kvf_store_* call may be made from any thread at once (include/kvfabric.h).
unsafe impl Send for Store<'_> {}
// SAFETY: as above.
unsafe impl Sync for Store<'_> {}

/// Keys as C strings, and pointers to them.
fn c_keys<S: AsRef<str>>(keys: &[S]) -> Result<(Vec<CString>, Vec<*const std::os::raw::c_char>)> {
    let owned = keys
        .iter()
        .map(|k| CString::new(k.as_ref()).map_err(|_| Error::InvalidArgument("a key holds a NUL byte".into())))
        .collect::<Result<Vec<_>>>()?;
    let ptrs = owned.iter().map(|k| k.as_ptr()).collect();
    Ok((owned, ptrs))
}

/// The C arrays of a put or get: keys, pieces per key, and every piece in order.
struct PageArrays {
    _owned: Vec<CString>,
    keys: Vec<*const std::os::raw::c_char>,
    counts: Vec<usize>,
    buffers: Vec<sys::kvf_store_buffer>,
}

impl PageArrays {
    fn new<S: AsRef<str>>(pages: &[(S, &[Piece<'_>])]) -> Result<Self> {
        let (_owned, keys) = c_keys(&pages.iter().map(|(k, _)| k.as_ref()).collect::<Vec<_>>())?;
        Ok(PageArrays {
            _owned,
            keys,
            counts: pages.iter().map(|(_, p)| p.len()).collect(),
            buffers: pages.iter().flat_map(|(_, p)| p.iter().map(Piece::raw)).collect(),
        })
    }
}

/// Per-key results of a batch call that ran: `Ok` or that key's error.
fn per_key(results: &[i32]) -> Vec<Result<()>> {
    results
        .iter()
        .enumerate()
        .map(|(i, &rc)| {
            if rc == sys::KVF_OK {
                Ok(())
            } else {
                // SAFETY: a NUL-terminated string valid until this thread's next store call; copied.
                let m = unsafe { CStr::from_ptr(sys::kvf_store_key_error(i)) }.to_string_lossy().into_owned();
                Err(Error::from_code(rc, m))
            }
        })
        .collect()
}

impl<'e> Store<'e> {
    /// A store over `engine`, with `settings` (`KVF_STORE_*` by name, e.g.
    /// `("KVF_STORE_MEMBERS", "10.0.0.2:7400")`) over the engine's own.
    pub fn new(engine: &'e Engine, settings: &[(&str, &str)]) -> Result<Self> {
        let owned = settings
            .iter()
            .map(|(k, v)| CString::new(format!("{k}={v}")))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::InvalidArgument("a setting holds a NUL byte".into()))?;
        let mut ptrs: Vec<*const std::os::raw::c_char> = owned.iter().map(|s| s.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut out: *mut sys::kvf_store = std::ptr::null_mut();
        // SAFETY: the settings live through the call; out is written on success.
        check(unsafe { sys::kvf_store_create(engine.raw(), ptrs.as_ptr(), &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| Error::Internal("kvf_store_create returned no store".into()))?;
        Ok(Store { raw, _engine: engine })
    }

    /// This node's control address, its name among the members ("" for a client).
    pub fn name(&self) -> String {
        // SAFETY: owned by the store, NUL-terminated; copied.
        unsafe { CStr::from_ptr(sys::kvf_store_name(self.raw.as_ptr())) }.to_string_lossy().into_owned()
    }

    /// Stores each page (`pages[i]`: its key and its pieces, whose bytes
    /// in order make the page), replacing an older page of the key. `Ok`
    /// with a result per key, or the error of the call itself.
    pub fn put<S: AsRef<str>>(&self, pages: &[(S, &[Piece<'_>])]) -> Result<Vec<Result<()>>> {
        let a = PageArrays::new(pages)?;
        let mut results = vec![0i32; pages.len()];
        // SAFETY: every array has the lengths given; the pieces' memory is
        // borrowed through the call.
        check(unsafe {
            sys::kvf_store_batch_put(
                self.raw.as_ptr(),
                a.keys.as_ptr(),
                a.counts.as_ptr(),
                pages.len(),
                a.buffers.as_ptr(),
                a.buffers.len(),
                results.as_mut_ptr(),
            )
        })?;
        Ok(per_key(&results))
    }

    /// Reads each page into its pieces, which it fills in order (they must
    /// hold the whole page). Per key: the page's length, or its error
    /// ([`Error::NotFound`] for a miss, with the reason in its message).
    pub fn get<S: AsRef<str>>(&self, pages: &[(S, &[Piece<'_>])]) -> Result<Vec<Result<u64>>> {
        let a = PageArrays::new(pages)?;
        let mut results = vec![0i32; pages.len()];
        let mut lengths = vec![0u64; pages.len()];
        // SAFETY: as in put; the pieces' regions are not reachable by the
        // caller during the call (their bytes need &mut Region).
        check(unsafe {
            sys::kvf_store_batch_get(
                self.raw.as_ptr(),
                a.keys.as_ptr(),
                a.counts.as_ptr(),
                pages.len(),
                a.buffers.as_ptr(),
                a.buffers.len(),
                results.as_mut_ptr(),
                lengths.as_mut_ptr(),
            )
        })?;
        Ok(per_key(&results).into_iter().zip(lengths).map(|(r, n)| r.map(|_| n)).collect())
    }

    /// Whether each key has a page (keys of an unreachable member count as absent).
    pub fn exists<S: AsRef<str>>(&self, keys: &[S]) -> Result<Vec<bool>> {
        let (_owned, ptrs) = c_keys(keys)?;
        let mut found = vec![0u8; keys.len()];
        // SAFETY: arrays of keys.len() entries.
        check(unsafe {
            sys::kvf_store_batch_exists(self.raw.as_ptr(), ptrs.as_ptr(), keys.len(), found.as_mut_ptr(), std::ptr::null_mut())
        })?;
        Ok(found.into_iter().map(|f| f != 0).collect())
    }

    /// Removes each key's page. Per key: `Ok`, or [`Error::NotFound`] when there was none.
    pub fn remove<S: AsRef<str>>(&self, keys: &[S]) -> Result<Vec<Result<()>>> {
        let (_owned, ptrs) = c_keys(keys)?;
        let mut results = vec![0i32; keys.len()];
        // SAFETY: arrays of keys.len() entries.
        check(unsafe { sys::kvf_store_batch_remove(self.raw.as_ptr(), ptrs.as_ptr(), keys.len(), results.as_mut_ptr()) })?;
        Ok(per_key(&results))
    }

    /// The members now in placement, by name.
    pub fn members(&self) -> Result<Vec<String>> {
        let (mut count, mut size) = (0usize, 0usize);
        // SAFETY: capacity 0 sizes the answer.
        check(unsafe { sys::kvf_store_members(self.raw.as_ptr(), std::ptr::null_mut(), 0, &mut count, &mut size) })?;
        let mut names = vec![0u8; size];
        // SAFETY: names holds `size` bytes.
        check(unsafe {
            sys::kvf_store_members(self.raw.as_ptr(), names.as_mut_ptr().cast(), names.len(), &mut count, &mut size)
        })?;
        Ok(names
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect())
    }

    /// This process's counters and this node's pool.
    pub fn stats(&self) -> Result<StoreStats> {
        let mut s = StoreStats::default();
        // SAFETY: out-parameter.
        check(unsafe { sys::kvf_store_get_stats(self.raw.as_ptr(), &mut s) })?;
        Ok(s)
    }
}

impl Drop for Store<'_> {
    fn drop(&mut self) {
        // SAFETY: this store's handle; nothing uses it after this.
        unsafe { sys::kvf_store_destroy(self.raw.as_ptr()) }
    }
}
