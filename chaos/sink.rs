//! The fenced sink: one PostgreSQL row per lock and slot that only takes a write whose fencing
//! token is at least the highest it has accepted (the pattern of examples/postgres), and a log of
//! every write, accepted or rejected, in commit order.
//!
//! Why per slot. A plain lock has one slot (0), so its row is the usual per-resource high-water
//! mark. A semaphore (`maxHolders: N`) lets N holders write at once, and its tokens only increase
//! within a slot: a grant reserved earlier can land later in another slot with a lower token than
//! a running holder's. One mark per lock would turn away current holders whose token is below
//! another slot's (and count those as "stale" writes, which would excuse overlaps they do not
//! explain); no mark at all would protect nothing. So each writer sends its slot (a pod's
//! `leasehold.dev/slot`, a claim's `status.slot` as `LockGuard::slot()` or `LEASEHOLD_SLOT`) and
//! the row of that slot fences it: a holder whose slot was granted again is rejected once the
//! newer holder of the slot has written, as with a plain lock. What this protects is the slot's
//! exclusivity and, with N rows, the limit: no more than N writers can be current at the resource
//! at once. It does not order writes across slots (nothing can: the slots run concurrently by
//! design), and it trusts the writer's slot, as a plain fence trusts the writer's token.

use tokio_postgres::{Client, NoTls};

use crate::check::Write;

/// Connects to the run's database on 127.0.0.1:`port` (trust authentication).
///
/// # Errors
/// When the server cannot be reached.
pub async fn connect(port: u16) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) =
        tokio_postgres::connect(&format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"), NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// Creates (or empties) the tables and one row per lock and slot at token 0: `locks` gives each
/// lock with its number of slots (1 for a plain lock, `maxHolders` for a semaphore).
///
/// # Errors
/// Any SQL error.
pub async fn reset(db: &Client, locks: &[(String, u32)]) -> Result<(), tokio_postgres::Error> {
    db.batch_execute(
        "DROP TABLE IF EXISTS fenced, writes;
         CREATE TABLE fenced (lock text NOT NULL, slot integer NOT NULL, token bigint NOT NULL,
                              writer text NOT NULL, PRIMARY KEY (lock, slot));
         CREATE TABLE writes (seq bigserial PRIMARY KEY, lock text NOT NULL, slot integer NOT NULL,
                              writer text NOT NULL, token bigint NOT NULL, at_ns bigint NOT NULL,
                              accepted boolean NOT NULL);",
    )
    .await?;
    for (l, slots) in locks {
        for k in 0..*slots as i32 {
            db.execute("INSERT INTO fenced VALUES ($1, $2, 0, '')", &[l, &k]).await?;
        }
    }
    Ok(())
}

/// Writes as `writer` in `slot` with `token`: accepted when `token` is at least the token of the
/// row of (`lock`, `slot`) (the row lock serialises writers of one slot); a slot with no row
/// (beyond the lock's slots) takes nothing. Logged either way. Returns whether it was accepted.
///
/// # Errors
/// Any SQL error (the write then did not happen).
pub async fn write(
    db: &Client,
    lock: &str,
    slot: u32,
    writer: &str,
    token: i64,
    at_ns: u64,
) -> Result<bool, tokio_postgres::Error> {
    let row = db
        .query_one(
            "WITH up AS (UPDATE fenced SET token = $4, writer = $3
                         WHERE lock = $1 AND slot = $2 AND token <= $4 RETURNING 1)
             INSERT INTO writes (lock, slot, writer, token, at_ns, accepted)
             SELECT $1, $2, $3, $4, $5, EXISTS (SELECT 1 FROM up) RETURNING accepted",
            &[&lock, &(slot as i32), &writer, &token, &(at_ns as i64)],
        )
        .await?;
    Ok(row.get(0))
}

/// Every write, in commit order.
///
/// # Errors
/// Any SQL error.
pub async fn history(db: &Client) -> Result<Vec<Write>, tokio_postgres::Error> {
    let rows = db.query("SELECT seq, lock, writer, token, at_ns, accepted, slot FROM writes ORDER BY seq", &[]).await?;
    Ok(rows
        .iter()
        .map(|r| Write {
            seq: r.get(0),
            lock: r.get(1),
            writer: r.get(2),
            token: r.get(3),
            slot: r.get::<_, i32>(6) as u32,
            at: r.get::<_, i64>(4) as u64,
            accepted: r.get(5),
        })
        .collect())
}
