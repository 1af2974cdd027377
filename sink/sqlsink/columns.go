package sqlsink

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// colKind is what the sink knows of a column's type: enough to write a
// value so that the database neither changes it silently nor refuses a
// form of it that another database takes.
type colKind uint8

const (
	kindOther   colKind = iota
	kindInteger         // PostgreSQL int2, int4, int8; MySQL TINYINT ... BIGINT
	kindDecimal         // NUMERIC, DECIMAL
	kindFloat           // PostgreSQL float4, float8; MySQL FLOAT, DOUBLE
	kindText            // PostgreSQL text, varchar, char, citext, name; MySQL CHAR, VARCHAR, *TEXT
)

// kindOf classifies a catalogue's type name (lower case: PostgreSQL's
// pg_type.typname, MySQL's DATA_TYPE).
func kindOf(typ string) colKind {
	switch typ {
	case "int2", "int4", "int8", "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		return kindInteger
	case "numeric", "decimal":
		return kindDecimal
	case "float4", "float8", "float", "double", "real", "double precision":
		return kindFloat
	case "text", "varchar", "bpchar", "citext", "name", "char", "tinytext", "mediumtext", "longtext":
		return kindText
	}
	return kindOther
}

// ValueError is a value that a column cannot hold as it is: a number that
// is not an integer, for an integer column (which would round or truncate
// it). The record holding it is refused (a *MappingError wraps it, and
// the checkpoint aborts).
type ValueError struct {
	Table  string // the table's ID
	Column string
	Value  any
	Reason string
}

// Error names the column and the value, and says why it does not fit.
func (e *ValueError) Error() string {
	return fmt.Sprintf("table %s column %s: %v (%T): %s", e.Table, e.Column, e.Value, e.Value, e.Reason)
}

// fit converts a row's values for the table's column kinds (as
// CheckTables read them): it returns vals itself when nothing changes,
// else a copy. For an integer column, a number (float, or a string that
// is a decimal numeral) that is not an integer is refused with a
// *ValueError rather than rounded (MySQL) or truncated (pgx), and an
// integer in another form (1.0, 1e3, a float64) is written as an integer;
// for a NUMERIC/DECIMAL column, a numeral (a string) is written in plain
// decimal notation, exactly (PostgreSQL COPY takes no exponent form); for a
// float column, as a float64 (the column rounds it to its precision, as
// the database would); for a text column, a number is
// written as its JSON text (pgx has no plan from a Go number to text).
func (t *table) fit(vals []any) ([]any, error) {
	kp := t.kinds.Load()
	if kp == nil {
		return vals, nil
	}
	kinds := *kp
	out, copied := vals, false
	for i, v := range vals {
		if i >= len(kinds) || v == nil {
			continue
		}
		nv, err := fitValue(kinds[i], v)
		if err != nil {
			return nil, &ValueError{Table: t.id(), Column: t.Columns[i].Name, Value: v, Reason: err.Error()}
		}
		if nv == nil {
			continue
		}
		if !copied {
			out, copied = append([]any(nil), vals...), true
		}
		out[i] = nv
	}
	return out, nil
}

// fitValue returns v converted for a column of kind k, nil if v is
// written as it is.
func fitValue(k colKind, v any) (any, error) {
	switch k {
	case kindInteger:
		switch x := v.(type) {
		case float64:
			return integralFloat(x)
		case float32:
			return integralFloat(float64(x))
		case string:
			return integralText(x)
		case json.Number:
			return integralText(string(x))
		}
	case kindDecimal:
		switch x := v.(type) {
		case string:
			if n, ok := parseNumeral(x); ok {
				if p, ok := n.plain(); ok && p != x {
					return p, nil
				}
			}
		case json.Number:
			if n, ok := parseNumeral(string(x)); ok {
				if p, ok := n.plain(); ok {
					return p, nil
				}
			}
			return string(x), nil
		}
	case kindFloat:
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case json.Number:
			s = string(x)
		default:
			return nil, nil
		}
		if _, ok := parseNumeral(s); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
				return f, nil
			}
		}
	case kindText:
		switch x := v.(type) {
		case json.Number:
			return string(x), nil
		case int64:
			return strconv.FormatInt(x, 10), nil
		case int:
			return strconv.Itoa(x), nil
		case int32:
			return strconv.FormatInt(int64(x), 10), nil
		case int16:
			return strconv.FormatInt(int64(x), 10), nil
		case int8:
			return strconv.FormatInt(int64(x), 10), nil
		case uint64:
			return strconv.FormatUint(x, 10), nil
		case uint:
			return strconv.FormatUint(uint64(x), 10), nil
		case uint32:
			return strconv.FormatUint(uint64(x), 10), nil
		case uint16:
			return strconv.FormatUint(uint64(x), 10), nil
		case uint8:
			return strconv.FormatUint(uint64(x), 10), nil
		case float64:
			return floatText(x, 64), nil
		case float32:
			return floatText(float64(x), 32), nil
		}
	}
	return nil, nil
}

// floatText is a float's JSON text (what encoding/json writes; NaN and
// infinities, which JSON lacks, as strconv does).
func floatText(f float64, bits int) string {
	if bits == 64 {
		if b, err := json.Marshal(f); err == nil {
			return string(b)
		}
	} else if b, err := json.Marshal(float32(f)); err == nil {
		return string(b)
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

// integralFloat returns f as an int64, or as its exact decimal text
// beyond int64; an error if f is not an integer.
func integralFloat(f float64) (any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) {
		return nil, fmt.Errorf("not an integer, for an integer column (it would be rounded or truncated)")
	}
	if f >= -(1<<63) && f < 1<<63 {
		return int64(f), nil
	}
	return new(big.Float).SetFloat64(f).Text('f', 0), nil
}

// integralText returns a decimal numeral as an int64, or as its plain
// integer text beyond int64; an error if it is not an integer. A string
// that is no decimal numeral is written as it is (the database decides).
func integralText(s string) (any, error) {
	n, ok := parseNumeral(s)
	if !ok {
		return nil, nil
	}
	if !n.integral() {
		return nil, fmt.Errorf("not an integer, for an integer column (it would be rounded or truncated)")
	}
	p, ok := n.plain()
	if !ok {
		return nil, nil // far beyond any integer column: the database refuses it
	}
	if dot := strings.IndexByte(p, '.'); dot >= 0 {
		p = p[:dot]
	}
	if p == "-0" {
		p = "0"
	}
	if i, err := strconv.ParseInt(p, 10, 64); err == nil {
		return i, nil
	}
	return p, nil
}

// numeral is a decimal numeral: (-)digits × 10^exp.
type numeral struct {
	neg      bool
	digits   string // the significand's digits, without the point
	exp      int    // the power of ten of its last digit
	exponent bool   // written with an exponent (e, E)
}

// maxPlainDigits bounds the plain form (PostgreSQL's numeric holds 131072
// digits before the point and 16383 after; MySQL's DECIMAL 65 in all): a
// numeral whose plain form would be longer is left as it is, for the
// database to refuse.
const maxPlainDigits = 1<<17 + 1<<14

// parseNumeral parses [+-]digits[.digits][(e|E)[+-]digits], with digits
// on at least one side of the point, and surrounding spaces.
func parseNumeral(s string) (numeral, bool) {
	var n numeral
	s = strings.TrimSpace(s)
	if s != "" && (s[0] == '-' || s[0] == '+') {
		n.neg = s[0] == '-'
		s = s[1:]
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intPart, frac := s[:i], ""
	s = s[i:]
	if strings.HasPrefix(s, ".") {
		s = s[1:]
		j := 0
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		frac, s = s[:j], s[j:]
	}
	if intPart == "" && frac == "" {
		return n, false
	}
	exp := 0
	if s != "" && (s[0] == 'e' || s[0] == 'E') {
		n.exponent = true
		s = s[1:]
		negExp := false
		if s != "" && (s[0] == '-' || s[0] == '+') {
			negExp = s[0] == '-'
			s = s[1:]
		}
		if s == "" {
			return n, false
		}
		for s != "" && s[0] >= '0' && s[0] <= '9' {
			if exp < 1e9 { // saturates: far beyond maxPlainDigits
				exp = exp*10 + int(s[0]-'0')
			}
			s = s[1:]
		}
		if negExp {
			exp = -exp
		}
	}
	if s != "" {
		return n, false
	}
	n.digits, n.exp = intPart+frac, exp-len(frac)
	return n, true
}

// point returns where the decimal point falls in digits.
func (n numeral) point() int { return len(n.digits) + n.exp }

// integral says whether the numeral is an integer.
func (n numeral) integral() bool {
	p := max(n.point(), 0)
	if p >= len(n.digits) {
		return true
	}
	return strings.Trim(n.digits[p:], "0") == ""
}

// plain returns the numeral in plain decimal notation, exactly (the
// digits as written, the point shifted by the exponent); false if it
// would be longer than maxPlainDigits.
func (n numeral) plain() (string, bool) {
	p := n.point()
	if p > maxPlainDigits || p < -maxPlainDigits || len(n.digits)-p > maxPlainDigits {
		return "", false
	}
	var sb strings.Builder
	if n.neg {
		sb.WriteByte('-')
	}
	switch {
	case p <= 0:
		sb.WriteString("0.")
		sb.WriteString(strings.Repeat("0", -p))
		sb.WriteString(n.digits)
	case p >= len(n.digits):
		ip := strings.TrimLeft(n.digits, "0")
		if ip == "" {
			sb.WriteString("0")
		} else {
			sb.WriteString(ip)
			sb.WriteString(strings.Repeat("0", p-len(n.digits)))
		}
	default:
		ip := strings.TrimLeft(n.digits[:p], "0")
		if ip == "" {
			ip = "0"
		}
		sb.WriteString(ip)
		sb.WriteByte('.')
		sb.WriteString(n.digits[p:])
	}
	return sb.String(), true
}
