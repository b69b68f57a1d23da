//! Host memory laid out for the NIC: aligned to 2 MiB, so the kernel can
//! back it with huge pages and a registration pins fewer, larger pages.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::error::{Error, Result};

/// The alignment of a [`HostBuffer`]: one x86-64 huge page.
pub const HUGE_PAGE: usize = 2 << 20;

/// Zeroed host memory aligned to [`HUGE_PAGE`], to register with
/// [`Engine::register`](crate::Engine::register) (it derefs to `[u8]`). A
/// `Vec<u8>` works too; this one lets transparent huge pages back the
/// whole buffer, as the C++ tools' buffers are.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer owns its memory exclusively, like a Box<[u8]>.
unsafe impl Send for HostBuffer {}
// SAFETY: shared access is read-only through Deref.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// `len` zeroed bytes (at least 1), aligned to [`HUGE_PAGE`].
    pub fn new(len: usize) -> Result<Self> {
        let layout = Layout::from_size_align(len.max(1), HUGE_PAGE)
            .map_err(|e| Error::InvalidArgument(format!("a buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout has a nonzero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })
            .ok_or_else(|| Error::Unavailable(format!("could not allocate {len} bytes of host memory")))?;
        Ok(HostBuffer { ptr, layout })
    }
}

impl Deref for HostBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr holds layout.size() initialized (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl DerefMut for HostBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer").field("addr", &self.ptr).field("len", &self.layout.size()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_writable() {
        let mut b = HostBuffer::new(3 << 20).unwrap();
        assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(b.len(), 3 << 20);
        assert!(b.iter().all(|&x| x == 0));
        b[12345] = 7;
        assert_eq!(b[12345], 7);
        assert_eq!(HostBuffer::new(0).unwrap().len(), 1);
    }
}
