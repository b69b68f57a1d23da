//! Errors: one variant per kvfabric status code, each with the engine's message.

use std::ffi::CStr;

/// What a failed call returns: the engine's status code as a variant, with
/// its message (what failed, where, what to do).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Bad input from the caller; nothing was changed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Unknown segment, buffer, batch or peer.
    #[error("not found: {0}")]
    NotFound(String),
    /// A local or remote range outside registered memory.
    #[error("out of range: {0}")]
    OutOfRange(String),
    /// The object still has work in flight.
    #[error("busy: {0}")]
    Busy(String),
    /// A deadline passed.
    #[error("timeout: {0}")]
    Timeout(String),
    /// libfabric failed the operation itself (bad key or address).
    #[error("fabric error: {0}")]
    Fabric(String),
    /// A peer could not be reached, or was lost with work in flight.
    #[error("network error: {0}")]
    Network(String),
    /// A peer sent a malformed message.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The provider or feature is absent on this machine.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A bug in kvfabric: please report it with the message.
    #[error("internal error: {0}")]
    Internal(String),
    /// The peer refused this engine (auth token), or a WRITE into read-only memory.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The engine is closed, or is a forked child's copy of its parent's.
    #[error("closed: {0}")]
    Closed(String),
    /// A code this crate does not know (a newer libkvfabric).
    #[error("kvfabric error {code}: {message}")]
    Other {
        /// The negative `KVF_E*` code.
        code: i32,
        /// The engine's message.
        message: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The error of `code` (a negative `KVF_E*`) with `message`.
    pub fn from_code(code: i32, message: String) -> Error {
        use kvfabric_sys as sys;
        match code {
            sys::KVF_EINVAL => Error::InvalidArgument(message),
            sys::KVF_ENOTFOUND => Error::NotFound(message),
            sys::KVF_ERANGE => Error::OutOfRange(message),
            sys::KVF_EBUSY => Error::Busy(message),
            sys::KVF_ETIMEOUT => Error::Timeout(message),
            sys::KVF_EFABRIC => Error::Fabric(message),
            sys::KVF_ENETWORK => Error::Network(message),
            sys::KVF_EPROTOCOL => Error::Protocol(message),
            sys::KVF_EUNAVAILABLE => Error::Unavailable(message),
            sys::KVF_EINTERNAL => Error::Internal(message),
            sys::KVF_EPERM => Error::PermissionDenied(message),
            sys::KVF_ECLOSED => Error::Closed(message),
            _ => Error::Other { code, message },
        }
    }

    /// The negative `KVF_E*` code of this error.
    pub fn code(&self) -> i32 {
        use kvfabric_sys as sys;
        match self {
            Error::InvalidArgument(_) => sys::KVF_EINVAL,
            Error::NotFound(_) => sys::KVF_ENOTFOUND,
            Error::OutOfRange(_) => sys::KVF_ERANGE,
            Error::Busy(_) => sys::KVF_EBUSY,
            Error::Timeout(_) => sys::KVF_ETIMEOUT,
            Error::Fabric(_) => sys::KVF_EFABRIC,
            Error::Network(_) => sys::KVF_ENETWORK,
            Error::Protocol(_) => sys::KVF_EPROTOCOL,
            Error::Unavailable(_) => sys::KVF_EUNAVAILABLE,
            Error::Internal(_) => sys::KVF_EINTERNAL,
            Error::PermissionDenied(_) => sys::KVF_EPERM,
            Error::Closed(_) => sys::KVF_ECLOSED,
            Error::Other { code, .. } => *code,
        }
    }

    /// The engine's message.
    pub fn message(&self) -> &str {
        match self {
            Error::InvalidArgument(m)
            | Error::NotFound(m)
            | Error::OutOfRange(m)
            | Error::Busy(m)
            | Error::Timeout(m)
            | Error::Fabric(m)
            | Error::Network(m)
            | Error::Protocol(m)
            | Error::Unavailable(m)
            | Error::Internal(m)
            | Error::PermissionDenied(m)
            | Error::Closed(m) => m,
            Error::Other { message, .. } => message,
        }
    }
}

/// The calling thread's last message from libkvfabric.
pub(crate) fn last_message() -> String {
    // SAFETY: kvf_last_error returns a NUL-terminated string owned by the
    // library, valid until this thread's next kvf_* call; it is copied here.
    unsafe { CStr::from_ptr(kvfabric_sys::kvf_last_error()) }.to_string_lossy().into_owned()
}

/// `Ok(())` for `KVF_OK`, else the error of `rc` with this thread's message.
pub(crate) fn check(rc: i32) -> Result<()> {
    if rc == kvfabric_sys::KVF_OK {
        Ok(())
    } else {
        Err(Error::from_code(rc, last_message()))
    }
}

/// The error of a status's code (no message of this thread's: a task's).
pub(crate) fn from_status_code(code: i32, what: &str) -> Error {
    // SAFETY: kvf_code_name returns a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(kvfabric_sys::kvf_code_name(code)) }.to_string_lossy();
    Error::from_code(code, format!("{what} ended with {name}"))
}
