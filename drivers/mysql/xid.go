package mysql

import (
	"encoding/hex"
	"strconv"

	"github.com/xadb/xa/xa"
)

// xidLiteral returns the XID as MySQL syntax: X'gtrid',X'bqual',formatID,
// both byte strings in hexadecimal. The literal is built here and nowhere
// else; it holds only the characters X ' , 0-9 a-f, so no byte of the XID
// can end the literal or the statement (fact 2: an XID is never a bind
// parameter). The caller has validated x.
func xidLiteral(x xa.XID) string {
	return formatXIDLiteral(int64(x.FormatID), x.Gtrid, x.Bqual)
}

func formatXIDLiteral(formatID int64, gtrid, bqual []byte) string {
	b := make([]byte, 0, 2*len(gtrid)+2*len(bqual)+20)
	b = append(b, "X'"...)
	b = hex.AppendEncode(b, gtrid)
	b = append(b, "',X'"...)
	b = hex.AppendEncode(b, bqual)
	b = append(b, "',"...)
	b = strconv.AppendInt(b, formatID, 10)
	return string(b)
}
