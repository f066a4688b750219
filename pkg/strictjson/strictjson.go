// Package strictjson decodes signed JSON payloads as an independent,
// strict verifier in another language would read them
// (docs/REPLAY.md, "Strict decoding").
//
// encoding/json matches object keys to struct fields case-insensitively,
// lets the last of two equal keys win, reads null into an int as 0, turns
// invalid UTF-8 and lone surrogate escapes into U+FFFD, and (with a
// Decoder) ignores what follows the first value. Each of these lets one
// signed payload say two things: `"exit_code":1,"EXIT_CODE":0` is 0 to Go
// and 1 to Python. [Check] refuses all of them with one pass over the
// bytes, guided by the Go type the payload decodes into; [Unmarshal] checks
// and then decodes, refusing unknown fields.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// Error is a payload that is not strict JSON for its type.
type Error struct {
	Offset int // byte offset where the problem was found
	Msg    string
}

func (e *Error) Error() string { return fmt.Sprintf("strict JSON: %s (at byte %d)", e.Msg, e.Offset) }

// MaxDepth bounds nesting, as encoding/json does.
const MaxDepth = 10000

// Unmarshal checks data with [Check] and decodes it into v, refusing
// unknown fields.
func Unmarshal(data []byte, v any) error {
	if err := Check(data, v); err != nil {
		return err
	}
	return DecodeChecked(data, v, v)
}

// DecodeChecked decodes data, which [Check](data, as) accepted, into v,
// refusing unknown fields; v must read exactly the keys as does. When the
// type of as has no embedded struct and no two fields of one name, Check
// has already refused every key encoding/json would not match (exact case
// and all), so it decodes with json.Unmarshal: one copy and one scan
// fewer than a Decoder. Otherwise a Decoder refuses unknown fields itself.
func DecodeChecked(data []byte, as, v any) error {
	if as != nil {
		t := reflect.TypeOf(as)
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if exact(t) {
			return json.Unmarshal(data, v)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

var exacts sync.Map // reflect.Type → bool

// exact reports whether Check's field names for t and every type it
// reaches are exactly those encoding/json matches: every JSON name of a
// struct, its embedded structs' promoted fields included, is unique.
// With two fields of one name encoding/json picks one or drops both by
// depth and tags, which Check only approximates.
func exact(t reflect.Type) bool {
	if e, ok := exacts.Load(t); ok {
		return e.(bool)
	}
	e := exactWalk(t, map[reflect.Type]bool{})
	exacts.Store(t, e)
	return e
}

func exactWalk(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return true
	}
	seen[t] = true
	switch {
	case t == rawMessage:
		return true
	case t.Kind() == reflect.Pointer:
		return exactWalk(t.Elem(), seen)
	case t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler),
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler):
		// Its own decoder reads it: a Decoder's DisallowUnknownFields
		// does not reach inside it either.
		return true
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Slice, reflect.Array, reflect.Map:
		return exactWalk(t.Elem(), seen)
	case reflect.Struct:
		return exactFields(t, map[string]bool{}, map[reflect.Type]bool{}, seen)
	}
	return true
}

// exactFields adds t's JSON names, promoted ones included, to names and
// reports whether each was new and every field's type is exact.
func exactFields(t reflect.Type, names map[string]bool, embedding, seen map[reflect.Type]bool) bool {
	if embedding[t] {
		return false
	}
	embedding[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if !exactFields(ft, names, embedding, seen) {
					return false
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if names[name] {
			return false
		}
		names[name] = true
		if !exactWalk(f.Type, seen) {
			return false
		}
	}
	return true
}

// Check reports whether data is exactly one JSON value, with no byte
// before or after it, in which:
//
//   - no object has two equal keys (compared after unescaping);
//   - every key of an object that v's type reads as a struct is exactly,
//     case included, the JSON name of one of its fields;
//   - null stands only where v's type has a nil (pointer, slice, map,
//     interface, json.RawMessage);
//   - every string is valid UTF-8 with no lone surrogate escape.
//
// v is a pointer to (or a value of) the type the payload decodes into; a
// nil v checks everything but the keys' names and nulls. Type mismatches
// (a string where a number belongs) are left to encoding/json.
func Check(data []byte, v any) error {
	var s *schema
	if v != nil {
		t := reflect.TypeOf(v)
		if t.Kind() == reflect.Pointer {
			t = t.Elem() // what v points to: a top-level null is refused
		}
		s = schemaOf(t)
	}
	c := checker{data: data}
	if len(data) > 0 && (data[0] == ' ' || data[0] == '\t' || data[0] == '\n' || data[0] == '\r') {
		return c.fail("bytes before the JSON value")
	}
	if err := c.value(s, 0); err != nil {
		return err
	}
	if c.pos != len(data) {
		return c.fail("bytes after the JSON value")
	}
	return nil
}

// schema is what Check needs of a Go type. A nil *schema accepts any
// value (keys unchecked, nulls allowed).
type schema struct {
	fields   map[string]*schema // struct: exact JSON name → field
	isStruct bool
	elem     *schema // slice, array or map element
	nullable bool
}

var schemas sync.Map // reflect.Type → *schema

var (
	rawMessage      = reflect.TypeFor[json.RawMessage]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func schemaOf(t reflect.Type) *schema {
	if s, ok := schemas.Load(t); ok {
		return s.(*schema)
	}
	s := build(t, map[reflect.Type]*schema{})
	schemas.Store(t, s)
	return s
}

func build(t reflect.Type, seen map[reflect.Type]*schema) *schema {
	if t.Kind() == reflect.Interface {
		return nil
	}
	if s, ok := seen[t]; ok {
		return s
	}
	s := &schema{}
	seen[t] = s
	switch {
	case t == rawMessage:
		s.nullable = true
		return s
	case t.Kind() == reflect.Pointer:
		*s = *build(t.Elem(), seen)
		s.nullable = true
		return s
	case t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler),
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler):
		// Its own decoder reads it (time.Time, a Duration): only the
		// generic rules apply, and null is refused as for any value.
		return s
	}
	switch t.Kind() {
	case reflect.Slice:
		s.nullable = true
		if t.Elem().Kind() != reflect.Uint8 { // []byte is a base64 string
			s.elem = build(t.Elem(), seen)
		}
	case reflect.Array:
		s.elem = build(t.Elem(), seen)
	case reflect.Map:
		s.nullable = true
		s.elem = build(t.Elem(), seen)
	case reflect.Struct:
		s.isStruct = true
		s.fields = map[string]*schema{}
		addFields(s, t, seen, 0)
	}
	return s
}

// addFields adds the JSON names of t's fields, promoting those of
// untagged embedded structs as encoding/json does (the shallower wins).
func addFields(s *schema, t reflect.Type, seen map[reflect.Type]*schema, depth int) {
	var embedded []reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				embedded = append(embedded, f)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := s.fields[name]; !dup {
			s.fields[name] = build(f.Type, seen)
		}
	}
	for _, f := range embedded {
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		addFields(s, ft, seen, depth+1)
	}
}

type checker struct {
	data []byte
	pos  int
}

func (c *checker) fail(format string, args ...any) error {
	return &Error{Offset: c.pos, Msg: fmt.Sprintf(format, args...)}
}

func (c *checker) ws() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *checker) value(s *schema, depth int) error {
	if depth > MaxDepth {
		return c.fail("nested too deeply")
	}
	c.ws()
	if c.pos >= len(c.data) {
		return c.fail("unexpected end of input")
	}
	var err error
	switch b := c.data[c.pos]; {
	case b == '{':
		err = c.object(s, depth)
	case b == '[':
		err = c.array(s, depth)
	case b == '"':
		_, err = c.str(false)
	case b == 'n':
		if s != nil && !s.nullable {
			return c.fail("null where the value cannot be null")
		}
		err = c.literal("null")
	case b == 't':
		err = c.literal("true")
	case b == 'f':
		err = c.literal("false")
	case b == '-' || '0' <= b && b <= '9':
		err = c.number()
	default:
		return c.fail("unexpected byte %q", b)
	}
	if err != nil {
		return err
	}
	if depth > 0 {
		c.ws()
	}
	return nil
}

func (c *checker) literal(lit string) error {
	if !bytes.HasPrefix(c.data[c.pos:], []byte(lit)) {
		return c.fail("invalid literal")
	}
	c.pos += len(lit)
	return nil
}

func (c *checker) number() error {
	d, i := c.data, c.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		c.pos = i
		return c.fail("invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		j := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		if i == j {
			c.pos = i
			return c.fail("invalid number")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		if i == j {
			c.pos = i
			return c.fail("invalid number")
		}
	}
	c.pos = i
	return nil
}

// str reads a string at c.pos. With want set it returns its unescaped
// value (for keys); it allocates only when the string has escapes.
func (c *checker) str(want bool) (string, error) {
	d := c.data
	start := c.pos + 1
	i := start
	escaped := false
	for {
		if i >= len(d) {
			c.pos = i
			return "", c.fail("unterminated string")
		}
		b := d[i]
		switch {
		case b == '"':
			c.pos = i + 1
			raw := d[start:i]
			if !want {
				return "", nil
			}
			if !escaped {
				return string(raw), nil
			}
			var s string
			if err := json.Unmarshal(d[start-1:i+1], &s); err != nil {
				return "", c.fail("invalid string: %v", err)
			}
			return s, nil
		case b < 0x20:
			c.pos = i
			return "", c.fail("control character in a string")
		case b == '\\':
			escaped = true
			if i+1 >= len(d) {
				c.pos = i
				return "", c.fail("unterminated string")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					c.pos = i
					return "", c.fail("invalid \\u escape")
				}
				i += 6
				switch {
				case 0xdc00 <= r && r <= 0xdfff:
					c.pos = i - 6
					return "", c.fail("lone surrogate escape")
				case 0xd800 <= r && r <= 0xdbff:
					lo, ok := rune(0), i+1 < len(d) && d[i] == '\\' && d[i+1] == 'u'
					if ok {
						lo, ok = hex4(d, i+2)
					}
					if !ok || lo < 0xdc00 || lo > 0xdfff {
						c.pos = i - 6
						return "", c.fail("lone surrogate escape")
					}
					i += 6
				}
			default:
				c.pos = i
				return "", c.fail("invalid escape")
			}
		case b < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && n <= 1 {
				c.pos = i
				return "", c.fail("invalid UTF-8 in a string")
			}
			i += n
		}
	}
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, b := range d[i : i+4] {
		var v byte
		switch {
		case '0' <= b && b <= '9':
			v = b - '0'
		case 'a' <= b && b <= 'f':
			v = b - 'a' + 10
		case 'A' <= b && b <= 'F':
			v = b - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

func (c *checker) object(s *schema, depth int) error {
	c.pos++ // '{'
	c.ws()
	if c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		return nil
	}
	// Few keys: a slice compares faster than a map.
	var seen []string
	var seenMap map[string]bool
	for {
		c.ws()
		if c.pos >= len(c.data) || c.data[c.pos] != '"' {
			return c.fail("expected a key")
		}
		at := c.pos
		key, err := c.str(true)
		if err != nil {
			return err
		}
		if seenMap != nil {
			if seenMap[key] {
				c.pos = at
				return c.fail("duplicate key %q", key)
			}
			seenMap[key] = true
		} else {
			for _, k := range seen {
				if k == key {
					c.pos = at
					return c.fail("duplicate key %q", key)
				}
			}
			seen = append(seen, key)
			if len(seen) > 16 {
				seenMap = make(map[string]bool, 32)
				for _, k := range seen {
					seenMap[k] = true
				}
			}
		}
		var child *schema
		if s != nil {
			switch {
			case s.isStruct:
				f, ok := s.fields[key]
				if !ok {
					c.pos = at
					return c.fail("key %q is not a field (keys match exactly, case included)", key)
				}
				child = f
			default:
				child = s.elem
			}
		}
		c.ws()
		if c.pos >= len(c.data) || c.data[c.pos] != ':' {
			return c.fail("expected ':'")
		}
		c.pos++
		if err := c.value(child, depth+1); err != nil {
			return err
		}
		if c.pos >= len(c.data) {
			return c.fail("unterminated object")
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
		case '}':
			c.pos++
			return nil
		default:
			return c.fail("expected ',' or '}'")
		}
	}
}

func (c *checker) array(s *schema, depth int) error {
	c.pos++ // '['
	c.ws()
	if c.pos < len(c.data) && c.data[c.pos] == ']' {
		c.pos++
		return nil
	}
	var child *schema
	if s != nil {
		child = s.elem
	}
	for {
		if err := c.value(child, depth+1); err != nil {
			return err
		}
		if c.pos >= len(c.data) {
			return c.fail("unterminated array")
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
		case ']':
			c.pos++
			return nil
		default:
			return c.fail("expected ',' or ']'")
		}
	}
}
