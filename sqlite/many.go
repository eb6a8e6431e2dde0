package sqlite

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// ManyFrom returns 8 ([wire.ManyBinder]): a statement over a JSON array
// of two to four operations costs more than their prepared statements
// one by one (it parses the array, and its RETURNING finds each row's
// place), about as much at six, and less from eight on: a fifth less at
// 16, a third less at 64 (docs/performance.md).
func (e *Engine) ManyFrom() int { return 8 }

// BindMany binds a Many form's parameters ([wire.ManyBinder]): ?1, one
// JSON text, an array with one element per operation in the batch's
// order, each the array of that operation's Args, which the form reads
// with json_each (or jsonb_each), whose key is the operation's place less
// one, reading argument k as value ->> k-1; and ?2, a JSON object from
// the hex of each operation's key (upper case, as hex() writes it) to its
// place, by which the form's RETURNING clause, which sees only the row it
// wrote, names the row's operation: ?2 ->> ('$."' || hex(…) || '"'). A key
// goes in hex because a JSON path can quote a label but not a quote
// within it.
//
// Every value must come back from ->> as the value a parameter would have
// bound: text (valid UTF-8, no NUL byte, which both engines refuse
// anyway), an integer, a float, a bool (1 or 0, as the driver binds it),
// or nil (NULL). Anything else ([]byte, a time, a type the driver would
// convert) is an error rather than a value that would come back changed.
func (e *Engine) BindMany(keys []string, args [][]any) ([]any, error) {
	b := make([]byte, 0, 64*len(args))
	b = append(b, '[')
	for i, a := range args {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for k, v := range a {
			if k > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, v); err != nil {
				return nil, fmt.Errorf("sqlite: argument %d of the operation at place %d: %w", k+1, i+1, err)
			}
		}
		b = append(b, ']')
	}
	b = append(b, ']')
	const digits = "0123456789ABCDEF"
	m := make([]byte, 0, 8+len(keys)*(2*len(keys[0])+8))
	m = append(m, '{')
	for i, k := range keys {
		if i > 0 {
			m = append(m, ',')
		}
		m = append(m, '"')
		for j := 0; j < len(k); j++ {
			m = append(m, digits[k[j]>>4], digits[k[j]&0xf])
		}
		m = append(m, '"', ':')
		m = strconv.AppendInt(m, int64(i+1), 10)
	}
	m = append(m, '}')
	return []any{string(b), string(m)}, nil
}

// appendJSON appends v to b as a JSON value that SQLite's ->> returns as
// the SQL value a parameter v would bind.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendJSONString(b, v)
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(v), 10), nil
	case bool:
		if v {
			return append(b, '1'), nil
		}
		return append(b, '0'), nil
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("JSON has no %v", v)
		}
		n := len(b)
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
		if !bytes.ContainsAny(b[n:], ".e") {
			b = append(b, ".0"...) // ->> reads 2 as an INTEGER, 2.0 as a REAL
		}
		return b, nil
	}
	return nil, fmt.Errorf("a %T has no JSON form that reads back unchanged", v)
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, the rest as it is (JSON text is UTF-8).
func appendJSONString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("text is not valid UTF-8")
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			return nil, fmt.Errorf("text holds a NUL byte")
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"'), nil
}
