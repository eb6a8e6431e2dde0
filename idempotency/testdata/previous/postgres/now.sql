-- now: the reaper's cutoff, read once per batch and bound to the batch's
-- statements as a constant. clock_timestamp() in the DELETE itself is
-- volatile, so the planner could not use the expiry index and would scan
-- the whole table for every batch.
-- $1 clock
SELECT COALESCE($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
