-- settings: what decides whether a commit this session acknowledges
-- survives a crash, a power loss or the loss of the primary, as this
-- session sees them (a setting made per role or per database for another
-- role is not seen). current_setting reads each; none is restricted to
-- superusers.
SELECT current_setting('fsync'),
       current_setting('full_page_writes'),
       current_setting('synchronous_commit'),
       current_setting('synchronous_standby_names'),
       pg_is_in_recovery()
