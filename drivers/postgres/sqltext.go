package postgres

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// transactionControl reports whether sql would start or end the
// transaction if the server ran it, and if so names the statement. Only the
// first statement is looked at: every user statement is sent with the
// extended query protocol, whose Parse message accepts a single statement,
// so there is no second one to look at (the server refuses the whole string
// with 42601).
//
// It reads the text the way the server's lexer does: whitespace, "--" line
// comments, nested "/* */" block comments and empty statements (";") before
// and between the keywords are skipped, keywords are case-insensitive, and
// a quoted identifier ("COMMIT") is not a keyword. ROLLBACK TO [SAVEPOINT],
// SAVEPOINT, RELEASE and PREPARE name AS ... (SQL-level prepared statements)
// are allowed.
func transactionControl(sql string) (stmt string, refused bool) {
	l := lexer{s: sql}
	first := l.word(true)
	switch first {
	case "begin", "commit", "end", "abort":
		return strings.ToUpper(first), true
	case "start":
		return "START TRANSACTION", true
	case "prepare":
		if l.word(false) == "transaction" {
			return "PREPARE TRANSACTION", true
		}
		return "", false
	case "rollback":
		// ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name is allowed;
		// ROLLBACK, ROLLBACK AND CHAIN and ROLLBACK PREPARED are not.
		next := l.word(false)
		if next == "work" || next == "transaction" {
			next = l.word(false)
		}
		if next == "to" {
			return "", false
		}
		if next == "prepared" {
			return "ROLLBACK PREPARED", true
		}
		return "ROLLBACK", true
	}
	return "", false
}

// lexer skips what PostgreSQL's lexer skips and reads keywords.
type lexer struct {
	s string
	i int
}

// word skips whitespace, comments and (if semicolons) empty statements,
// and returns the next keyword in lower case, or "" when the next token is
// not a keyword-like word (a quoted identifier, a literal, a symbol, the
// end of the text).
func (l *lexer) word(semicolons bool) string {
	l.skip(semicolons)
	start := l.i
	for l.i < len(l.s) {
		c := l.s[l.i]
		if identStart(c) || (l.i > start && (c >= '0' && c <= '9' || c == '$')) {
			l.i++
			continue
		}
		break
	}
	return strings.ToLower(l.s[start:l.i])
}

func (l *lexer) skip(semicolons bool) {
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			l.i++
		case semicolons && c == ';':
			l.i++
		case c == '-' && strings.HasPrefix(l.s[l.i:], "--"):
			// A line comment ends at a newline or carriage return.
			j := strings.IndexAny(l.s[l.i:], "\n\r")
			if j < 0 {
				l.i = len(l.s)
			} else {
				l.i += j + 1
			}
		case c == '/' && strings.HasPrefix(l.s[l.i:], "/*"):
			// Block comments nest in PostgreSQL.
			depth := 0
			for l.i < len(l.s) {
				if strings.HasPrefix(l.s[l.i:], "/*") {
					depth++
					l.i += 2
				} else if strings.HasPrefix(l.s[l.i:], "*/") {
					depth--
					l.i += 2
					if depth == 0 {
						break
					}
				} else {
					l.i++
				}
			}
		default:
			return
		}
	}
}

// identStart reports whether c may start an unquoted identifier or keyword
// (PostgreSQL also accepts every byte of a multi-byte character).
func identStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

// quoteLiteral returns s as a PostgreSQL escape-string literal (E'...'),
// with quotes and backslashes escaped, so that it reads back as s whatever
// standard_conforming_strings says. The gid of PREPARE TRANSACTION, COMMIT
// PREPARED and ROLLBACK PREPARED cannot be a bind parameter (fact 12); this
// is the only way gids reach SQL text. s must be valid UTF-8 without NUL
// bytes (XID.String never produces either); the server refuses anything
// else rather than misreading it.
func quoteLiteral(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 3)
	b.WriteString("E'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'':
			b.WriteString("''")
		case '\\':
			b.WriteString(`\\`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// writeTag reports whether a statement that answered tag certainly changed
// data, which assigns the transaction an xid: such a branch is prepared
// without first asking the server whether it wrote. A tag it does not
// recognise is "not known to have written" and costs only that question.
func writeTag(tag pgconn.CommandTag) bool {
	switch {
	case tag.Insert(), tag.Update(), tag.Delete():
		return tag.RowsAffected() > 0
	}
	s := tag.String()
	// COPY TO answers "COPY n" as well; counting it as a write costs at
	// worst an empty prepared transaction, never a wrong vote.
	for _, p := range []string{"MERGE ", "COPY "} {
		if strings.HasPrefix(s, p) {
			return tag.RowsAffected() > 0
		}
	}
	for _, p := range []string{"CREATE ", "ALTER ", "DROP ", "TRUNCATE", "GRANT", "REVOKE", "COMMENT", "SECURITY LABEL"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
