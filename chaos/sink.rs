//! The fenced sink: one PostgreSQL row per lock that only takes a write whose fencing token is at
//! least the highest it has accepted (the pattern of examples/postgres), and a log of every
//! write, accepted or rejected, in commit order.

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

/// Creates (or empties) the tables and one row per lock at token 0.
///
/// # Errors
/// Any SQL error.
pub async fn reset(db: &Client, locks: &[String]) -> Result<(), tokio_postgres::Error> {
    db.batch_execute(
        "DROP TABLE IF EXISTS fenced, writes;
         CREATE TABLE fenced (lock text PRIMARY KEY, token bigint NOT NULL, writer text NOT NULL);
         CREATE TABLE writes (seq bigserial PRIMARY KEY, lock text NOT NULL, writer text NOT NULL,
                              token bigint NOT NULL, at_ns bigint NOT NULL, accepted boolean NOT NULL);",
    )
    .await?;
    for l in locks {
        db.execute("INSERT INTO fenced VALUES ($1, 0, '')", &[l]).await?;
    }
    Ok(())
}

/// Writes as `writer` with `token`: accepted when `token` is at least the row's token (the row
/// lock serialises writers of one lock). Logged either way. Returns whether it was accepted.
///
/// # Errors
/// Any SQL error (the write then did not happen).
pub async fn write(
    db: &Client,
    lock: &str,
    writer: &str,
    token: i64,
    at_ns: u64,
) -> Result<bool, tokio_postgres::Error> {
    let row = db
        .query_one(
            "WITH up AS (UPDATE fenced SET token = $3, writer = $2 WHERE lock = $1 AND token <= $3 RETURNING 1)
             INSERT INTO writes (lock, writer, token, at_ns, accepted)
             SELECT $1, $2, $3, $4, EXISTS (SELECT 1 FROM up) RETURNING accepted",
            &[&lock, &writer, &token, &(at_ns as i64)],
        )
        .await?;
    Ok(row.get(0))
}

/// Every write, in commit order.
///
/// # Errors
/// Any SQL error.
pub async fn history(db: &Client) -> Result<Vec<Write>, tokio_postgres::Error> {
    let rows = db.query("SELECT seq, lock, writer, token, at_ns, accepted FROM writes ORDER BY seq", &[]).await?;
    Ok(rows
        .iter()
        .map(|r| Write {
            seq: r.get(0),
            lock: r.get(1),
            writer: r.get(2),
            token: r.get(3),
            at: r.get::<_, i64>(4) as u64,
            accepted: r.get(5),
        })
        .collect())
}
