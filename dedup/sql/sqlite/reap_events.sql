-- reap_events: delete the tenant's event rows of the fingerprints whose
-- claims claim's reap just deleted in the same transaction (?2, a JSON
-- array of fingerprints). SQLite's write lock keeps any Observe out until
-- commit.
-- ?1 tenant, ?2 fingerprints (JSON array)
DELETE FROM racefree_dedup_events
WHERE tenant = ?1 AND fingerprint IN (SELECT value FROM json_each(?2))
