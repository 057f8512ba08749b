//! What a downstream crate writes to hold a lock (compiled by `make lib-check`).

use leasehold::holder::{Holder, HolderError};

/// Runs `work` under lock `lock` of namespace `ns` and returns what it returned with the fencing
/// token it ran under.
pub async fn with_lock<T>(
    client: kube::Client,
    ns: &str,
    lock: &str,
    identity: &str,
    work: impl AsyncFnOnce(i64) -> T,
) -> Result<(T, i64), HolderError> {
    let guard = Holder::new(client, ns, lock, identity).acquire(None).await?;
    let token = guard.token();
    let out = work(token).await;
    guard.release().await?;
    Ok((out, token))
}
