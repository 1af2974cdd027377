// Package schema is the ent schema of the data-layer tests: one table of
// accounts, in both databases.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Account is a row of accounts (id, balance).
type Account struct {
	ent.Schema
}

// Fields of Account.
func (Account) Fields() []ent.Field {
	return []ent.Field{
		field.Int("id"),
		field.Int("balance"),
	}
}
