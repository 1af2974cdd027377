// Package sink will be the exactly-once sink: records between two
// checkpoints go into one XA transaction, prepared at the checkpoint and
// committed once the checkpoint is durable (see docs/protocol.md).
// It is not built yet; no issue has been taken for it.
package sink
