// Package xa is the transaction manager's core: XIDs, votes, decisions and
// error kinds, the ResourceManager and DecisionLog interfaces the
// coordinator consumes, and the two-phase commit coordinator itself.
//
// It imports no database driver: drivers/mysql and drivers/postgres
// implement ResourceManager, recovery/ implements DecisionLog.
package xa
