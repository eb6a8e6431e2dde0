-- insert: write one entry. The PRIMARY KEY (scope, seq) refuses a number
-- handed out twice, whatever the code above it does; the trigger
-- racefree_audit_chain refuses a number that is not the head's and sets
-- the head's MAC (and key epoch after a rotation entry) to this entry's.
-- ?1 scope, ?2 seq, ?3 at, ?4 actor, ?5 action, ?6 subject, ?7 data,
-- ?8 key id, ?9 prev_mac, ?10 mac
INSERT INTO racefree_audit (scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
