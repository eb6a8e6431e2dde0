-- counts: whether this session counts the rows its statements insert,
-- update and delete (track_counts), which never-analyzed,
-- stale-statistics and autovacuum all read. Off, a session's changes
-- are not counted: the counts understate what changed, and autovacuum
-- does not act on what it cannot see.
SELECT current_setting('track_counts')::boolean
