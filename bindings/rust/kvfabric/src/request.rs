//! Requests, batches and their status.

use std::marker::PhantomData;
use std::time::Duration;

use kvfabric_sys as sys;

use crate::engine::{Engine, Region, Segment};
use crate::error::{check, from_status_code, Error, Result};

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Copy the peer's memory into local memory.
    Read,
    /// Copy local memory into the peer's memory.
    Write,
}

/// One READ or WRITE between a range of a local [`Region`] and a peer's
/// memory. It borrows the region, so the region outlives it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'r> {
    op: Op,
    local: *mut u8,
    length: u64,
    target: sys::kvf_segment,
    remote_addr: u64,
    engine: usize,
    _region: PhantomData<&'r Region<'r>>,
}

// SAFETY: a request is a description; the memory it names is borrowed through 'r.
unsafe impl Send for Request<'_> {}
// SAFETY: as above.
unsafe impl Sync for Request<'_> {}

impl<'r> Request<'r> {
    /// WRITE `length` bytes of `region` from `offset` to `remote_addr` in
    /// `segment`. [`Error::OutOfRange`] when the range leaves the region,
    /// [`Error::InvalidArgument`] when the region and the segment belong to
    /// different engines or `length` is 0.
    pub fn write(region: &'r Region<'_>, offset: usize, segment: &Segment<'_>, remote_addr: u64, length: usize) -> Result<Self> {
        Self::new(Op::Write, region, offset, segment, remote_addr, length)
    }

    /// READ `length` bytes at `remote_addr` in `segment` into `region` from
    /// `offset`; errors as [`Request::write`].
    pub fn read(region: &'r Region<'_>, offset: usize, segment: &Segment<'_>, remote_addr: u64, length: usize) -> Result<Self> {
        Self::new(Op::Read, region, offset, segment, remote_addr, length)
    }

    fn new(op: Op, region: &'r Region<'_>, offset: usize, segment: &Segment<'_>, remote_addr: u64, length: usize) -> Result<Self> {
        if length == 0 {
            return Err(Error::InvalidArgument("a request of 0 bytes".into()));
        }
        if offset.checked_add(length).map_or(true, |end| end > region.len()) {
            return Err(Error::OutOfRange(format!(
                "local range [{offset}, +{length}) leaves the region of {} bytes",
                region.len()
            )));
        }
        if region.engine_id() != segment.engine {
            return Err(Error::InvalidArgument("the region and the segment belong to different engines".into()));
        }
        Ok(Request {
            op,
            local: region.ptr_at(offset),
            length: length as u64,
            target: segment.handle,
            remote_addr,
            engine: segment.engine,
            _region: PhantomData,
        })
    }

    /// READ or WRITE.
    pub fn op(&self) -> Op {
        self.op
    }

    /// Bytes it moves.
    pub fn len(&self) -> u64 {
        self.length
    }

    /// Whether it moves no bytes (never: construction refuses that).
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    pub(crate) fn engine_id(&self) -> usize {
        self.engine
    }

    pub(crate) fn raw(&self) -> sys::kvf_request {
        sys::kvf_request {
            opcode: match self.op {
                Op::Read => sys::KVF_READ as _,
                Op::Write => sys::KVF_WRITE as _,
            },
            local: self.local.cast(),
            target: self.target,
            remote_addr: self.remote_addr,
            length: self.length,
        }
    }
}

/// Where a request or batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Submitted and not ended yet.
    Pending,
    /// Every byte moved.
    Completed,
    /// Ended with an error.
    Failed,
    /// Its deadline (`KVF_TRANSFER_TIMEOUT_MS`) passed first.
    Timeout,
}

/// The status of a request, or of a whole batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferStatus {
    /// Pending, completed, failed or timed out.
    pub state: TaskState,
    /// Bytes moved so far.
    pub transferred_bytes: u64,
    /// The failure, when `state` is `Failed` or `Timeout`.
    pub error: Option<Error>,
}

impl TransferStatus {
    fn from_raw(s: sys::kvf_transfer_status, what: &str) -> Self {
        let state = match s.state as i64 {
            x if x == sys::KVF_COMPLETED as i64 => TaskState::Completed,
            x if x == sys::KVF_FAILED as i64 => TaskState::Failed,
            x if x == sys::KVF_TIMEOUT as i64 => TaskState::Timeout,
            _ => TaskState::Pending,
        };
        let error = (s.error != sys::KVF_OK).then(|| from_status_code(s.error, what));
        TransferStatus { state, transferred_bytes: s.transferred_bytes, error }
    }

    /// `Ok` when completed, the failure otherwise (pending: [`Error::Busy`]).
    pub fn result(&self) -> Result<()> {
        match (self.state, &self.error) {
            (TaskState::Completed, _) => Ok(()),
            (TaskState::Pending, _) => Err(Error::Busy("still pending".into())),
            (_, Some(e)) => Err(e.clone()),
            (s, None) => Err(Error::Internal(format!("ended {s:?} with no error"))),
        }
    }
}

/// Requests submitted together ([`Engine::submit`]). It borrows their
/// regions until every request has ended: dropping a batch first waits for
/// that, then frees it.
#[derive(Debug)]
pub struct Batch<'r> {
    engine: &'r Engine,
    id: sys::kvf_batch,
    len: usize,
    // The thread that waits for a Completion, and what it shares with it.
    #[cfg(feature = "async")]
    waiter: Option<(std::thread::JoinHandle<()>, std::sync::Arc<std::sync::Mutex<completion::Shared>>)>,
}

impl<'r> Batch<'r> {
    pub(crate) fn submit(engine: &'r Engine, requests: &[Request<'r>]) -> Result<Batch<'r>> {
        let raw = engine.raw_requests(requests)?;
        if raw.is_empty() {
            return Err(Error::InvalidArgument("a batch of no requests".into()));
        }
        let mut id: sys::kvf_batch = 0;
        // SAFETY: out-parameter written on success.
        check(unsafe { sys::kvf_batch_allocate(engine.raw(), raw.len(), &mut id) })?;
        // SAFETY: the requests' memory is borrowed for 'r, as long as the batch.
        if let Err(e) = check(unsafe { sys::kvf_batch_submit(engine.raw(), id, raw.as_ptr(), raw.len()) }) {
            // SAFETY: nothing was submitted: the batch is free to release.
            unsafe { sys::kvf_batch_free(engine.raw(), id) };
            return Err(e);
        }
        Ok(Batch {
            engine,
            id,
            len: raw.len(),
            #[cfg(feature = "async")]
            waiter: None,
        })
    }

    /// Requests in the batch.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no requests (never: submit refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The aggregate now: completed when every request is, failed or timed
    /// out when one is and the rest ended, else pending. Never blocks.
    pub fn status(&self) -> Result<TransferStatus> {
        let mut s = sys::kvf_transfer_status::default();
        // SAFETY: out-parameter.
        check(unsafe { sys::kvf_batch_status(self.engine.raw(), self.id, &mut s) })?;
        Ok(TransferStatus::from_raw(s, "the batch"))
    }

    /// Whether every request has ended.
    pub fn is_done(&self) -> Result<bool> {
        Ok(self.status()?.state != TaskState::Pending)
    }

    /// Request `index`'s status now.
    pub fn task_status(&self, index: usize) -> Result<TransferStatus> {
        let mut s = sys::kvf_transfer_status::default();
        // SAFETY: out-parameter; the engine checks the index.
        check(unsafe { sys::kvf_task_status(self.engine.raw(), self.id, index, &mut s) })?;
        Ok(TransferStatus::from_raw(s, &format!("request {index}")))
    }

    /// Blocks until every request has ended, or `timeout` passes (`None`:
    /// no limit), and returns the aggregate status (pending after a timeout).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<TransferStatus> {
        let ms = timeout.map_or(-1, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
        let mut s = sys::kvf_transfer_status::default();
        // SAFETY: out-parameter.
        check(unsafe { sys::kvf_batch_wait(self.engine.raw(), self.id, ms, &mut s) })?;
        Ok(TransferStatus::from_raw(s, "the batch"))
    }

    /// Ends the requests still running now, as their deadline would
    /// (timed out, or failed where one had failed already), and returns the
    /// batch's status, which has then ended. Over tcp and verbs (unless
    /// `KVF_CLOSE_CONNECTIONS=off`) the connections that carry them are
    /// closed first, so once this returns none of them writes the borrowed
    /// buffers; on efa an operation the device still holds may complete
    /// later. Dropping a batch waits for its requests to end: call this
    /// first to end them now.
    pub fn expire(&self) -> Result<TransferStatus> {
        // SAFETY: the batch is this object's.
        check(unsafe { sys::kvf_batch_expire(self.engine.raw(), self.id) })?;
        self.status()
    }

    /// A `Future` that resolves to the batch's final status once every
    /// request has ended (a helper thread waits; nothing is polled in a loop).
    #[cfg(feature = "async")]
    pub fn completion(&mut self) -> Completion<'_, 'r> {
        Completion { batch: self }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        #[cfg(feature = "async")]
        if let Some((w, _)) = self.waiter.take() {
            let _ = w.join();
        }
        // The engine may still be moving bytes of the borrowed regions: wait
        // until every request ended (a closed engine has abandoned them).
        let mut s = sys::kvf_transfer_status::default();
        // SAFETY: the batch is this object's; out-parameter.
        unsafe { sys::kvf_batch_wait(self.engine.raw(), self.id, -1, &mut s) };
        // SAFETY: every request ended.
        unsafe { sys::kvf_batch_free(self.engine.raw(), self.id) };
    }
}

#[cfg(feature = "async")]
mod completion {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    #[derive(Default, Debug)]
    pub(crate) struct Shared {
        done: bool,
        waker: Option<Waker>,
    }

    /// The future of [`Batch::completion`]: the batch's final status.
    pub struct Completion<'b, 'r> {
        pub(super) batch: &'b mut Batch<'r>,
    }

    impl std::fmt::Debug for Completion<'_, '_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Completion").field("batch", &self.batch.id).finish()
        }
    }

    impl Future for Completion<'_, '_> {
        type Output = Result<TransferStatus>;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let batch = &mut *self.get_mut().batch;
            let status = batch.status()?;
            if status.state != TaskState::Pending {
                return Poll::Ready(Ok(status));
            }
            if let Some((_, shared)) = &batch.waiter {
                let mut s = shared.lock().expect("completion state");
                if !s.done {
                    s.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                drop(s);
                return Poll::Ready(batch.status());
            }
            // First pending poll: a thread waits in the engine and wakes the task.
            let shared = Arc::new(Mutex::new(Shared { done: false, waker: Some(cx.waker().clone()) }));
            let engine = batch.engine.raw() as usize;
            let id = batch.id;
            let theirs = Arc::clone(&shared);
            // The batch joins the thread before it is freed (Batch::drop),
            // and the engine outlives the batch.
            let thread = std::thread::spawn(move || {
                let mut s = sys::kvf_transfer_status::default();
                // SAFETY: see above: engine and batch outlive this thread.
                unsafe { sys::kvf_batch_wait(engine as *mut sys::kvf_engine, id, -1, &mut s) };
                let waker = {
                    let mut st = theirs.lock().expect("completion state");
                    st.done = true;
                    st.waker.take()
                };
                if let Some(w) = waker {
                    w.wake();
                }
            });
            batch.waiter = Some((thread, shared));
            Poll::Pending
        }
    }
}

#[cfg(feature = "async")]
pub use completion::Completion;
