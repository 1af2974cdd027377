// Package entdb is ent's generated client for the data-layer tests
// (internal/datalayer): regenerate with go generate.
package entdb

//go:generate go run -mod=mod entgo.io/ent/cmd/ent generate ./schema
