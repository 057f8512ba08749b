-- The fenced write. :token is the writer's LEASEHOLD_FENCING_TOKEN (psql variable here; a bind
-- parameter in application code). Check the row count: 0 means "stale token: stop, you lost the
-- lock".
--   psql -v token="$LEASEHOLD_FENCING_TOKEN" -v body="'...'" -f examples/postgres/fenced-update.sql
UPDATE reports
   SET body = :body, fencing_token = :token
 WHERE id = 1
   AND fencing_token <= :token;
