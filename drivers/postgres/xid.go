package postgres

import "github.com/xadb/xa/xa"

// gidLiteral returns the gid of xid (xid.String()) as an SQL literal,
// after checking that xid is valid.
func gidLiteral(xid xa.XID) (string, error) {
	if err := xid.Validate(); err != nil {
		return "", err
	}
	return quoteLiteral(xid.String()), nil
}
