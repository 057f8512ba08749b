//! `leasehold release LOCK --force`: break-glass for a lock whose holder is stuck (a process
//! that holds and renews but must be stopped, a grant nobody can find).
//!
//! It does not hand the lock over at once, which would let the next holder start while the old
//! one may still run. It revokes the grant: the Lease is rewritten (compare-and-swap on the
//! resourceVersion read) to name a tombstone claim holder
//! (`leasehold.dev/force-released-by:<user>`) with the same token. The old holder's next renewal
//! finds that the Lease no longer names it, so it is lost: `leasehold lock` stops its command and
//! the library reports `lost()`. The operator treats the tombstone as a claim holder that never
//! renews and grants the next waiter, with a higher token, once a lease duration has passed. That
//! is the same handling and the same bound as a hand-edited Lease holder (the chaos run's
//! `lease-edit` fault). A Warning Event `ForceReleased` on the lock names who did it.
//!
//! A pod holder is refused. The operator keeps a running pod's grant (it repairs a Lease that
//! disagrees with it), so the way to break a pod's lock is to delete the pod. With the chart's
//! admission policies, only the operator, the holder itself and the exempt groups may rewrite a
//! Lease's holder; anyone else gets the policy's 403.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};

use crate::crd::DistributedLock;
use crate::lock::grant::HolderKind;
use crate::lock::{HOLDER_KIND_ANNOTATION, HOLDER_UID_ANNOTATION};

/// Options of `leasehold release`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReleaseArgs {
    /// Name of the DistributedLock.
    pub lock: String,
    /// Namespace of the lock (default: the kubeconfig's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Required: revoking someone else's grant is break-glass.
    #[arg(long)]
    pub force: bool,
    /// Which cluster (`--kubeconfig`, `--context`).
    #[command(flatten)]
    pub kube: crate::cli::KubeArgs,
}

/// Prefix of the tombstone holder identity a forced release writes.
pub const TOMBSTONE_PREFIX: &str = "leasehold.dev/force-released-by:";

/// What a forced release does with a Lease.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nobody holds the lock (or only a tombstone): nothing to do.
    Free,
    /// A pod holds it and still exists and has not finished: refused (delete the pod).
    RunningPod(String),
    /// Revoke the grant of this holder (a claim holder, or a pod that is gone or finished).
    Revoke(String),
}

/// Decides from the Lease and, for a pod holder, the pod (`None`: gone).
pub fn verdict(lease: &Lease, holder_pod: Option<&Pod>) -> Verdict {
    let view = crate::lease::view(lease);
    let Some(holder) = view.holder else { return Verdict::Free };
    if holder.name.starts_with(TOMBSTONE_PREFIX) {
        return Verdict::Free;
    }
    let running = holder_pod.is_some_and(|p| {
        p.uid() == holder.uid
            && p.metadata.deletion_timestamp.is_none()
            && !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
    });
    match holder.kind {
        HolderKind::Pod if running => Verdict::RunningPod(holder.name),
        _ => Verdict::Revoke(holder.name),
    }
}

/// The Lease with the grant revoked: the holder replaced by the tombstone claim holder for
/// `user`; the token, the token floor and the renew time are kept.
pub fn revoked(mut lease: Lease, user: &str) -> Lease {
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = Some(format!("{TOMBSTONE_PREFIX}{user}"));
    }
    let ann = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.remove(HOLDER_UID_ANNOTATION);
    ann.insert(HOLDER_KIND_ANNOTATION.into(), "Claim".into());
    lease
}

/// Runs `leasehold release`; returns the exit status (0 revoked or already free, 1 refused or
/// failed, 2 without `--force`).
///
/// # Errors
/// When the cluster cannot be reached.
pub async fn run(args: ReleaseArgs) -> anyhow::Result<i32> {
    if !args.force {
        eprintln!(
            "leasehold release: revoking the grant of a running holder is break-glass: its command is stopped at \
             its next renewal; add --force to do it"
        );
        return Ok(2);
    }
    let client = args.kube.client().await?;
    let ns = args.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    let locks: Api<DistributedLock> = Api::namespaced(client.clone(), &ns);
    let Some(lock) = locks.get_opt(&args.lock).await.context("reading the lock")? else {
        eprintln!("leasehold release: DistributedLock {} not found in namespace {ns}", args.lock);
        return Ok(1);
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let Some(lease) = leases.get_opt(&args.lock).await.context("reading the lock's Lease")? else {
        println!("lock {} has no Lease yet: nobody holds it", args.lock);
        return Ok(0);
    };
    if !crate::lease::is_owned_by(&lease, &lock) {
        eprintln!("leasehold release: Lease {ns}/{} does not belong to the lock; not touching it", args.lock);
        return Ok(1);
    }
    let holder = crate::lease::view(&lease).holder;
    let pod = match &holder {
        Some(h) if h.kind == HolderKind::Pod => Api::<Pod>::namespaced(client.clone(), &ns).get_opt(&h.name).await?,
        _ => None,
    };
    let token = crate::lease::view(&lease).token;
    match verdict(&lease, pod.as_ref()) {
        Verdict::Free => {
            println!("lock {} is free: nothing to release", args.lock);
            Ok(0)
        }
        Verdict::RunningPod(p) => {
            eprintln!(
                "leasehold release: lock {} is held by pod {p} (token {token}), which still runs; the operator keeps \
                 a running pod's grant. Delete the pod to break the lock: kubectl delete pod {p} -n {ns}",
                args.lock
            );
            Ok(1)
        }
        Verdict::Revoke(old) => {
            let user = crate::lock_cli::whoami(&client).await.unwrap_or_else(|| "unknown".into());
            let name = lease.name_any();
            // A PUT with the resourceVersion just read: if the Lease changed meanwhile (a renewal,
            // a release, a grant) this fails with 409 and nothing is overwritten.
            match leases.replace(&name, &PostParams::default(), &revoked(lease, &user)).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    eprintln!("leasehold release: the Lease changed while releasing (409); run it again");
                    return Ok(1);
                }
                Err(e) => {
                    eprintln!("leasehold release: {}", crate::lock_cli::error_text(&e.into()));
                    return Ok(1);
                }
            }
            let note = format!(
                "grant of {old} (fencing token {token}) revoked by {user} with leasehold release --force; the next \
                 waiter is granted once the lease duration has passed"
            );
            let reporter = Reporter { controller: "leasehold-release".into(), instance: None };
            let recorder = Recorder::new(client.clone(), reporter);
            let event = Event {
                type_: EventType::Warning,
                reason: "ForceReleased".into(),
                note: Some(note.clone()),
                action: "ForceRelease".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &lock.object_ref(&())).await {
                eprintln!("leasehold release: revoked, but the Event could not be written: {e}");
            }
            println!("lock {}: {note}", args.lock);
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lease(holder: Option<&str>, kind: &str) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "l", "annotations": {
                "leasehold.dev/fencing-token": "7", "leasehold.dev/token-floor": "0",
                "leasehold.dev/holder-uid": "u1", "leasehold.dev/holder-kind": kind}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        }))
        .unwrap()
    }

    fn pod(uid: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "uid": uid}, "status": {"phase": phase}})).unwrap()
    }

    #[test]
    fn a_running_pod_holder_is_refused_and_a_gone_or_finished_one_revoked() {
        let l = lease(Some("p"), "Pod");
        assert_eq!(verdict(&l, Some(&pod("u1", "Running"))), Verdict::RunningPod("p".into()));
        assert_eq!(verdict(&l, Some(&pod("u1", "Succeeded"))), Verdict::Revoke("p".into()));
        assert_eq!(
            verdict(&l, Some(&pod("other-uid", "Running"))),
            Verdict::Revoke("p".into()),
            "a new pod, same name"
        );
        assert_eq!(verdict(&l, None), Verdict::Revoke("p".into()));
    }

    #[test]
    fn a_claim_holder_is_revoked_to_a_tombstone_that_keeps_the_token() {
        let l = lease(Some("worker-1"), "Claim");
        assert_eq!(verdict(&l, None), Verdict::Revoke("worker-1".into()));
        let r = revoked(l, "alice");
        let view = crate::lease::view(&r);
        let holder = view.holder.unwrap();
        assert_eq!(holder.name, "leasehold.dev/force-released-by:alice");
        assert_eq!((holder.kind, holder.uid, view.token), (HolderKind::Claim, None, 7));
        assert_eq!(verdict(&r, None), Verdict::Free, "a tombstone is not released again");
        assert_eq!(verdict(&lease(None, "Claim"), None), Verdict::Free);
    }
}
