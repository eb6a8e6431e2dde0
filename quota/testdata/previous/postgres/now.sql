-- now: the database clock in Unix ms, as every quota statement reads it.
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
