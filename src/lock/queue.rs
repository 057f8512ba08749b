//! Waiter ordering: first come, first served.
//!
//! Waiters are ordered by `metadata.creationTimestamp` (second resolution in the API), then by
//! name, which makes the order total and identical in every operator replica. Only the head of
//! the queue is ever granted, so a release wakes exactly one waiter (no thundering herd).

use k8s_openapi::jiff::Timestamp;

/// What the queue needs to know about one waiter.
pub trait Waiter {
    /// `metadata.creationTimestamp`.
    fn created(&self) -> Timestamp;
    /// `metadata.name`.
    fn name(&self) -> &str;
}

/// Sorts waiters into grant order in place: oldest first, ties broken by name.
pub fn sort<W: Waiter>(waiters: &mut [W]) {
    waiters.sort_by(|a, b| a.created().cmp(&b.created()).then_with(|| a.name().cmp(b.name())));
}

impl<W: Waiter> Waiter for &W {
    fn created(&self) -> Timestamp {
        (*self).created()
    }
    fn name(&self) -> &str {
        (*self).name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct W(i64, &'static str);
    impl Waiter for W {
        fn created(&self) -> Timestamp {
            Timestamp::from_second(self.0).unwrap()
        }
        fn name(&self) -> &str {
            self.1
        }
    }

    #[test]
    fn oldest_first_then_by_name() {
        let mut ws = vec![W(20, "a"), W(10, "z"), W(10, "b"), W(5, "q")];
        sort(&mut ws);
        let order: Vec<_> = ws.iter().map(|w| w.1).collect();
        assert_eq!(order, ["q", "b", "z", "a"]);
    }
}
