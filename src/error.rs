//! The crate's error type: one variant per failed operation.

use crate::lock::fencing::TokenExhausted;

/// Everything that can fail while reconciling a lock.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed. `op` names the call (e.g. `"update Lease"`).
    #[error("{op} failed: {source}")]
    Kube {
        /// What the operator was doing.
        op: &'static str,
        /// The client error (status code and message for API errors).
        #[source]
        source: kube::Error,
    },
    /// A Kubernetes API call did not answer within the per-call timeout.
    #[error("{op} timed out after {seconds} s")]
    Timeout {
        /// What the operator was doing.
        op: &'static str,
        /// The per-call timeout in seconds.
        seconds: u64,
    },
    /// The Lease named after the lock exists but is not controlled by the lock.
    #[error("Lease {0} exists but is not controlled by this DistributedLock; rename the lock or delete the Lease")]
    LeaseNotOwned(String),
    /// Token arithmetic overflowed.
    #[error(transparent)]
    Token(#[from] TokenExhausted),
    /// An object lacked a field the API server always sets (name, namespace, uid).
    #[error("object has no {0}")]
    MissingField(&'static str),
    /// The state machine asked for a write this controller does not serve yet (the multi-lock
    /// decisions: the controller builds no multi-lock candidate yet, so this is never expected).
    #[error("the {0} decision is not served by this operator version")]
    NotServed(&'static str),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Stable PascalCase reason, used for Events and the `reason` metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube { .. } if self.is_conflict() => "Conflict",
            Error::Kube { .. } if self.is_forbidden() => "Forbidden",
            Error::Kube { .. } => "ApiError",
            Error::Timeout { .. } => "ApiTimeout",
            Error::LeaseNotOwned(_) => "LeaseNotOwned",
            Error::Token(_) => "TokenExhausted",
            Error::MissingField(_) => "MalformedObject",
            Error::NotServed(_) => "NotServed",
        }
    }

    /// HTTP 409: an optimistic-concurrency precondition (resourceVersion or UID) failed, or the
    /// object already exists. Expected under concurrency: re-observe and decide again.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(s), .. } if s.code == 409)
    }

    /// HTTP 403: RBAC or an admission policy denied the call.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(s), .. } if s.code == 403)
    }

    /// HTTP 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(s), .. } if s.code == 404)
    }
}

/// Per-call timeout for API writes and reads done inside a reconcile.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs one API call with [`CALL_TIMEOUT`], naming it `op` in errors.
///
/// # Errors
/// [`Error::Timeout`] after [`CALL_TIMEOUT`]; [`Error::Kube`] when the call fails.
pub async fn call<T>(op: &'static str, fut: impl std::future::Future<Output = Result<T, kube::Error>>) -> Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(r) => r.map_err(|source| Error::Kube { op, source }),
        Err(_) => Err(Error::Timeout { op, seconds: CALL_TIMEOUT.as_secs() }),
    }
}
