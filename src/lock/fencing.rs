//! Fencing-token arithmetic.
//!
//! A fencing token is a positive integer that grows with every grant of one lock and never
//! repeats (Kleppmann, "How to do distributed locking", 2016; Burrows, "The Chubby lock service",
//! OSDI 2006, "sequencers"). The resource that the holder writes keeps the highest token it has
//! seen and rejects writes carrying a lower one, so a paused holder whose lease expired cannot
//! overwrite the work of its successor.
//!
//! Where tokens live:
//! - the Lease annotation `leasehold.dev/fencing-token` holds the current grant's token;
//! - the Lease annotation `leasehold.dev/token-floor` says every token issued before the Lease
//!   was (re)created is at most this number;
//! - the lock's `status.tokenCeiling` is a reservation: no token above it is ever written. It is
//!   raised by a compare-and-swap (resourceVersion precondition) before a token above it is used,
//!   and a recreated Lease starts above the ceiling it read in that compare-and-swap.
//!
//! Together: tokens may skip numbers (a reserved block is abandoned when the Lease is deleted),
//! but never repeat, whichever write the operator crashes between. `leaseTransitions` is not used:
//! other Lease clients may rewrite it.

use thiserror::Error;

/// How many tokens one ceiling reservation covers. Larger blocks mean fewer status writes; the
/// price is a jump of up to this many numbers when a Lease is deleted and recreated.
pub const RESERVATION_BLOCK: i64 = 1_000;

/// The largest token Leasehold issues: tokens are JSON integers (`int64` in the CRD schema).
pub const MAX_TOKEN: i64 = i64::MAX - RESERVATION_BLOCK;

/// Token arithmetic failed: the lock has issued so many grants that the next token would not fit
/// in a signed 64-bit integer. Not reachable in practice (one grant per nanosecond for 290 years).
#[derive(Debug, Error, PartialEq, Eq)]
#[error("fencing token space exhausted at {0}")]
pub struct TokenExhausted(pub i64);

/// The token of the next grant: one above both the current grant's token and the Lease's floor.
///
/// # Errors
/// [`TokenExhausted`] above [`MAX_TOKEN`].
pub fn next_token(current: i64, floor: i64) -> Result<i64, TokenExhausted> {
    let base = current.max(floor).max(0);
    match base.checked_add(1) {
        Some(n) if n <= MAX_TOKEN => Ok(n),
        _ => Err(TokenExhausted(base)),
    }
}

/// Whether issuing `token` first needs the ceiling raised.
pub fn needs_reservation(token: i64, ceiling: i64) -> bool {
    token > ceiling
}

/// The new ceiling after a reservation from `ceiling`: at least `token`, one block ahead.
///
/// # Errors
/// [`TokenExhausted`] when the block would pass [`MAX_TOKEN`].
pub fn reserve(ceiling: i64, token: i64) -> Result<i64, TokenExhausted> {
    let base = ceiling.max(token).max(0);
    base.checked_add(RESERVATION_BLOCK).ok_or(TokenExhausted(base))
}

/// The new ceiling when a semaphore reserves exactly the one token it grants next: at least
/// `token`, and above `ceiling` (issue 14: each grant of a semaphore takes its token by its own
/// compare-and-swap on the ceiling, so two slots never issue the same token).
///
/// # Errors
/// [`TokenExhausted`] when the result would pass [`MAX_TOKEN`].
pub fn reserve_one(ceiling: i64, token: i64) -> Result<i64, TokenExhausted> {
    let base = ceiling.max(0);
    match base.checked_add(1) {
        Some(n) if n.max(token) <= MAX_TOKEN => Ok(n.max(token)),
        _ => Err(TokenExhausted(base.max(token))),
    }
}

/// Parses a token annotation value. Returns `None` for anything that is not a positive decimal
/// integer (a hand-edited annotation must not crash the operator, nor become a token).
pub fn parse_token(value: &str) -> Option<i64> {
    value.trim().parse::<i64>().ok().filter(|t| *t > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_token_is_above_current_and_floor() {
        assert_eq!(next_token(0, 0), Ok(1));
        assert_eq!(next_token(7, 0), Ok(8));
        assert_eq!(next_token(7, 1000), Ok(1001));
        assert_eq!(next_token(2000, 1000), Ok(2001));
        assert_eq!(next_token(-5, -9), Ok(1));
    }

    #[test]
    fn a_semaphore_reserves_exactly_the_token_it_grants() {
        assert_eq!(reserve_one(1000, 7), Ok(1001));
        assert_eq!(reserve_one(5, 9), Ok(9));
        assert_eq!(reserve_one(MAX_TOKEN, 0), Err(TokenExhausted(MAX_TOKEN)));
    }

    #[test]
    fn next_token_never_wraps() {
        assert_eq!(next_token(MAX_TOKEN, 0), Err(TokenExhausted(MAX_TOKEN)));
        assert_eq!(next_token(0, i64::MAX), Err(TokenExhausted(i64::MAX)));
    }

    #[test]
    fn reservation_covers_the_token_and_a_block() {
        assert!(needs_reservation(1, 0));
        assert!(!needs_reservation(5, 5));
        assert_eq!(reserve(0, 1), Ok(1 + RESERVATION_BLOCK));
        assert_eq!(reserve(10, 50), Ok(50 + RESERVATION_BLOCK));
        assert!(reserve(i64::MAX - 1, 0).is_err());
    }

    #[test]
    fn parse_token_rejects_garbage() {
        assert_eq!(parse_token("42"), Some(42));
        assert_eq!(parse_token(" 42 "), Some(42));
        assert_eq!(parse_token("0"), None);
        assert_eq!(parse_token("-3"), None);
        assert_eq!(parse_token("4x"), None);
        assert_eq!(parse_token("99999999999999999999"), None);
    }
}
