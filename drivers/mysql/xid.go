package mysql

import (
	"encoding/hex"
	"fmt"
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

// parseRecoverRow turns one XA RECOVER row (formatID, gtrid_length,
// bqual_length, data) into a PreparedBranch. Raw is always set; XID is
// left zero when the row is not a valid xa.XID (a foreign branch with a
// formatID beyond int32, or lengths that do not add up), so that such a
// branch is listed but can never be mistaken for one of ours. A malformed
// row never fails the listing: the other branches, ours among them, must
// still be recovered.
func parseRecoverRow(formatID, gtridLen, bqualLen int64, data []byte) xa.PreparedBranch {
	if gtridLen < 0 || bqualLen < 0 || gtridLen+bqualLen != int64(len(data)) {
		return xa.PreparedBranch{Raw: fmt.Sprintf("malformed XA RECOVER row: formatID %d, gtrid_length %d, bqual_length %d, data X'%x'",
			formatID, gtridLen, bqualLen, data)}
	}
	gtrid := append([]byte(nil), data[:gtridLen]...)
	bqual := append([]byte{}, data[gtridLen:]...)
	p := xa.PreparedBranch{Raw: formatXIDLiteral(formatID, gtrid, bqual)}
	if formatID >= 0 && formatID <= 1<<31-1 {
		x := xa.XID{FormatID: int32(formatID), Gtrid: gtrid, Bqual: bqual}
		if x.Validate() == nil {
			p.XID = x
		}
	}
	return p
}
