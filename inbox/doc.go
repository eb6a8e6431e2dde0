// Package inbox receives at-least-once deliveries, such as webhooks,
// exactly once.
//
// Inbox.Receive inserts the event's (tenant, source, ID) under a UNIQUE
// constraint in the same transaction as the caller's processing function,
// before that function runs. The guarantee: for each event ID, the processing function's
// writes commit at most once, and they commit unless the function fails
// permanently, however many times, concurrently or not, and from however
// many processes the event is delivered.
//
//   - A redelivery of a recorded event is a duplicate: the function is not
//     called and Receive reports Result.Duplicate.
//   - When the function fails, its writes and the record roll back together,
//     so the next delivery processes the event again.
//   - Failures are classified asymmetrically. An error is transient unless
//     the function marked it with Permanent: Receive returns it and the
//     sender should retry (answer 5xx). A permanent failure is recorded as
//     "failed" with its reason and acknowledged (Receive returns a nil
//     error: answer 2xx), so the sender stops retrying; its redeliveries are
//     duplicates. Wrongly treating a transient failure as permanent drops an
//     event for good, while the opposite costs one more delivery.
//
// Events belong to the tenant of the call's context (package tenant:
// tenant.With, Default when none): the event IDs, sources and arrival
// numbers of one tenant are apart from every other's, and on PostgreSQL
// Receive's transaction sets the tenant, so row-level security applies to
// the processing function's statements too. Before migration 011 every
// call is racefree.ErrSchemaOutdated.
//
// Event IDs are kept for Options.Retention (7 days by default; make it at
// least the sender's retry horizon) and then deleted by Inbox.Reap, one
// tenant at a time, in batches of Options.ReapBatch (1000) rows. The payload is stored too, and
// each event gets an arrival number within its source that Inbox.List
// pages by, at most MaxListBytes of payload a page. Numbers are assigned
// at the end of the receiving transaction under the source's counter row,
// so they become visible in order and a reader paging with "after" never
// skips one. With racefree.Config.Combine on (the default), Receive without a
// processing function commits in a batch with concurrent deliveries of the
// tenant, numbered the same way (Inbox.Receive).
//
// Handler serves one source over HTTP: it verifies the Standard Webhooks
// signature (Verifier: HMAC-SHA256, "whsec_" secrets, several at once for
// rotation, a 5-minute timestamp tolerance, as strict as the reference
// libraries or stricter) before it deduplicates, and answers 204 for new,
// duplicate and permanently failed deliveries, and 401 with a
// WWW-Authenticate challenge for a bad signature.
//
// Receive's processing function, like racefree.DB.InTx's, may run more
// than once when the engine aborts the transaction for a transient
// conflict, so it must only write through its *sql.Tx. Effects outside the
// database belong after the commit, in an outbox.
package inbox
