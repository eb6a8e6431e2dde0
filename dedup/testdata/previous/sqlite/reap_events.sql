-- reap_events: delete the event rows of the fingerprints whose claims
-- claim's reap just deleted in the same transaction (?1, a JSON array of
-- fingerprints). SQLite's write lock keeps any Observe out until commit.
-- ?1 fingerprints (JSON array)
DELETE FROM racefree_dedup_events
WHERE fingerprint IN (SELECT value FROM json_each(?1))
