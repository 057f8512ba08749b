-- Fencing at the resource, for a SQL table: every row remembers the highest fencing token that
-- wrote it, and a write only applies when its token is not lower. A holder that lost its lock
-- (paused past its lease) still carries its old token, so its late write updates 0 rows.

CREATE TABLE IF NOT EXISTS reports (
    id            integer PRIMARY KEY,
    body          text    NOT NULL,
    fencing_token bigint  NOT NULL DEFAULT 0
);

-- The fenced write is in fenced-update.sql.
