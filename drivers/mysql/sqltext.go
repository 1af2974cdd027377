package mysql

// firstKeyword returns the first word of a statement in upper case,
// skipping white space, comments and opening parentheses.
func firstKeyword(q string) string {
	i := 0
	for i < len(q) {
		switch c := q[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(':
			i++
		case c == '#' || (c == '-' && i+2 < len(q) && q[i+1] == '-' && (q[i+2] == ' ' || q[i+2] == '\t' || q[i+2] == '\n')):
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			if i+2 < len(q) && (q[i+2] == '!' || q[i+2] == 'M') {
				// Executable comment (/*! ... */, /*M! ... */): its content
				// is code.
				i += 3
				for i < len(q) && (q[i] == '!' || q[i] >= '0' && q[i] <= '9') {
					i++
				}
				continue
			}
			end := i + 2
			for end+1 < len(q) && !(q[end] == '*' && q[end+1] == '/') {
				end++
			}
			i = end + 2
		default:
			j := i
			for j < len(q) && (q[j] >= 'a' && q[j] <= 'z' || q[j] >= 'A' && q[j] <= 'Z' || q[j] == '_') {
				j++
			}
			w := []byte(q[i:j])
			for k, c := range w {
				if c >= 'a' && c <= 'z' {
					w[k] = c - 'a' + 'A'
				}
			}
			return string(w)
		}
	}
	return ""
}

// transactionControl reports whether a statement's first word ends, begins
// or otherwise controls the transaction.
func transactionControl(kw string) bool {
	switch kw {
	case "COMMIT", "ROLLBACK", "BEGIN", "START", "XA", "SET":
		return true
	}
	return false
}
