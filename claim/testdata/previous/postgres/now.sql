-- now: the database clock in Unix ms, read once by the reaper to compute a
-- batch's cutoff (clock_timestamp(): the time of this statement, not of the
-- transaction's start).
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
