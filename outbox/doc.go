// Package outbox is a transactional outbox: side effects that leave the
// database (an external API, a search index, a notification) are stored as
// messages in the caller's own transaction, and relays deliver them after
// the commit, at least once, until they succeed or fail for good.
//
// Enqueue writes a message in the caller's *sql.Tx: it exists exactly when
// the caller's writes commit, and a rollback leaves nothing to deliver. A
// Relay claims due messages in batches under a lease with a fencing token
// (PostgreSQL FOR UPDATE SKIP LOCKED; SQLite an IMMEDIATE transaction),
// hands each to a Handler with a stable idempotency key (the message id),
// heartbeats the lease while the handler runs, and completes or fails the
// message with a statement conditioned on (id, fence): a relay whose lease
// lapsed and was taken over can change nothing (*StaleFenceError), and a
// handler that outlives its lease has its context cancelled
// (ErrLeaseLost). A relay's successful completions ride on its next
// claim, one commit for both; on PostgreSQL that claim, with its tenant
// and the completions, is one round trip.
//
// Fences across a failover: on PostgreSQL a claim's fence is at least
// (timeline - 1) * 2^40 + 1, the floor of the timeline the primary writes
// WAL on, which goes up at every promotion; so a failover to an
// asynchronous standby that lost leases the old primary acknowledged never
// hands out their fences again, and a worker of a lost lease can complete
// nothing the new primary leased. The shape, the bound and the assumption
// are claim's (package claim). SQLite has no failover: its fences grow by
// one.
//
// Failures are transient unless marked Permanent or classified so (an HTTP
// 4xx other than 408 and 429): when in doubt, retry. Transient failures are
// retried with exponential backoff and jitter, or after RetryAfter. After
// the last attempt, or a permanent failure, the message is dead at once:
// its lease is released in the same statement, and Options.OnExhausted
// runs in that transaction. The latest failures of each message are kept
// (Options.History). Dead messages are listed, redriven and discarded by id
// or filter (Dead, Redrive, Discard), and counted by Stats.
//
// Ordered messages (Message.Ordered, Options.OrderedTopics) are delivered
// one at a time per (topic, key), in the order their transactions
// committed: a key whose oldest message is retrying or dead waits until it
// is delivered, redriven or discarded.
//
// Relays are woken by PostgreSQL LISTEN/NOTIFY ([RelayOptions.Listen]) and,
// within a process, by an in-process signal, and poll every tenant as a
// fallback ([RelayOptions.PollInterval]). Reap deletes delivered messages
// after Options.Retention, in batches, one tenant at a time.
//
// HTTPHandler delivers messages as HTTP POSTs with Idempotency-Key (the
// message id), Racefree-Outbox-Tenant (the tenant that enqueued it) and
// Racefree-Outbox-Fence (the lease's fence) set; a message's own headers
// may not start with "Racefree-".
// Ancillary runs a request's follow-up step right after its commit and
// turns the step's failure into a *Warning plus a retry by the relays,
// never into a failure of the request.
//
// Every operation runs for the tenant its context names (tenant.With;
// "default" when none) and needs migration 013; before it, it is
// racefree.ErrSchemaOutdated.
package outbox
