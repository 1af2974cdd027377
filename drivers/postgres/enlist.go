package postgres

import (
	"context"
	"fmt"

	"github.com/xadb/xa/xa"
)

// Enlist enlists rm in tx (tx.Enlist) and returns the branch's session.
// Enlisting again in the same transaction returns the same session.
func (rm *RM) Enlist(ctx context.Context, tx *xa.Tx) (*Conn, error) {
	s, err := tx.Enlist(ctx, rm)
	if err != nil {
		return nil, err
	}
	c, ok := s.(*Conn)
	if !ok {
		return nil, fmt.Errorf("postgres: the session of %q is a %T, not a *postgres.Conn", rm.name, s)
	}
	return c, nil
}
