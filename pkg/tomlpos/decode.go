package tomlpos

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
)

// Error is a problem in a TOML file, worded for people, with the line it is
// on (0 when unknown). Callers wrap it in their own error type, which names
// the file.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// Describer is implemented by a type that decodes from TOML text (an
// [encoding.TextUnmarshaler]) to say what its value looks like, for
// messages: `a duration string such as "2m"`.
type Describer interface {
	TOMLDescription() string
}

// Decode decodes data into v, which must be a pointer, strictly: a syntax
// error, a value of the wrong type and an unknown key are each an [*Error]
// naming the line.
//
// BurntSushi/toml reports a type error at the line of the same key's last
// definition in the file, so in the second of three [[operation]] tables it
// names the third. Decode therefore finds type errors itself, walking the
// decoded values against v's type and each key to its line (see
// [keyLines]); it does so only once BurntSushi/toml has refused the file,
// so what is accepted is exactly what BurntSushi/toml accepts.
func Decode(data []byte, v any) error {
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(v)
	if err == nil {
		if und := md.Undecoded(); len(und) > 0 {
			return &Error{Line: KeyLine(data, md.Keys(), und[0]), Msg: fmt.Sprintf("unknown key %q", und[0].String())}
		}
		return notTable(data, md, reflect.TypeOf(v))
	}
	var generic map[string]any
	gmd, gerr := toml.NewDecoder(bytes.NewReader(data)).Decode(&generic)
	if gerr != nil {
		return fallback(gerr) // a syntax error: its position is right
	}
	if e := typeError(data, gmd, generic, reflect.TypeOf(v)); e != nil {
		return e
	}
	return fallback(err)
}

// notTable finds a key that decodes into a map but is not a table:
// BurntSushi/toml leaves such a map empty without a word (`set = "X"`
// would drop every variable). The file's keys say cheaply which could be
// one (a map's key with no key under it: a scalar, or an empty table); only
// then is the file walked as for a type error.
func notTable(data []byte, md toml.MetaData, t reflect.Type) error {
	keys := md.Keys()
	for i, k := range keys {
		ft := typeAt(t, k)
		if ft == nil || ft.Kind() != reflect.Map || ft.Implements(textUnmarshaler) || reflect.PointerTo(ft).Implements(textUnmarshaler) {
			continue
		}
		if i+1 < len(keys) && len(keys[i+1]) > len(k) && slices.Equal(keys[i+1][:len(k)], k) {
			continue // a table with keys
		}
		var generic map[string]any
		gmd, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&generic)
		if err != nil {
			return fallback(err)
		}
		if e := typeError(data, gmd, generic, t); e != nil {
			return e
		}
		return nil
	}
	return nil
}

// typeAt returns the Go type key decodes into from t, or nil.
func typeAt(t reflect.Type, key toml.Key) reflect.Type {
	for _, k := range key {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := field(t, k)
			if !ok {
				return nil
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return nil
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

var lineRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^line (\d+)(?: \(last key "[^"]*"\))?: `)
})

// fallback words an error of BurntSushi/toml as it comes.
func fallback(err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &Error{Line: pe.Position.Line, Msg: pe.Message}
	}
	msg := strings.TrimPrefix(err.Error(), "toml: ")
	line := 0
	if m := lineRE().FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = strings.TrimPrefix(msg, m[0])
	}
	return &Error{Line: line, Msg: msg}
}

// problem is a value that does not fit its Go type. path holds keys
// (string) and array indices (int).
type problem struct {
	path []any
	msg  string
}

// typeError returns the first, in file order, of the values in generic that
// do not fit t, or nil when it finds none.
func typeError(data []byte, md toml.MetaData, generic map[string]any, t reflect.Type) *Error {
	var probs []problem
	check(&probs, nil, generic, t)
	if len(probs) == 0 {
		return nil
	}
	loc := newLocator(data, md)
	best := &Error{}
	for i, p := range probs {
		line := loc.line(p.path)
		if i == 0 || line > 0 && (best.Line == 0 || line < best.Line) {
			best = &Error{Line: line, Msg: p.msg}
		}
	}
	return best
}

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	tomlUnmarshaler = reflect.TypeFor[toml.Unmarshaler]()
	primitive       = reflect.TypeFor[toml.Primitive]()
)

// check walks value against t as BurntSushi/toml's unify does, adding a
// problem for each value that does not fit.
func check(probs *[]problem, path []any, value any, t reflect.Type) {
	for t.Kind() == reflect.Pointer && !t.Implements(textUnmarshaler) {
		t = t.Elem()
	}
	if value == nil || t == primitive || t.Implements(tomlUnmarshaler) || reflect.PointerTo(t).Implements(tomlUnmarshaler) {
		return
	}
	bad := func(msg string) { *probs = append(*probs, problem{path: path, msg: msg}) }
	mismatch := func() { bad(fmt.Sprintf("%s must be %s, not %s", name(path), want(t), kind(value))) }
	if t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		checkText(bad, mismatch, path, value, t)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := value.(map[string]any)
		if !ok {
			mismatch()
			return
		}
		for _, k := range sortedKeys(m) {
			if f, ok := field(t, k); ok {
				check(probs, extend(path, k), m[k], f.Type)
			}
		}
	case reflect.Map:
		m, ok := value.(map[string]any)
		if !ok {
			mismatch()
			return
		}
		for _, k := range sortedKeys(m) {
			check(probs, extend(path, k), m[k], t.Elem())
		}
	case reflect.Slice, reflect.Array:
		rv := reflect.ValueOf(value)
		if rv.Kind() != reflect.Slice {
			mismatch()
			return
		}
		if t.Kind() == reflect.Array && rv.Len() != t.Len() {
			bad(fmt.Sprintf("%s must be a list of %d, not %d", name(path), t.Len(), rv.Len()))
			return
		}
		var inner []problem
		for i := range rv.Len() {
			check(&inner, extend(path, i), rv.Index(i).Interface(), t.Elem())
		}
		if len(inner) > 0 && scalar(t.Elem()) {
			// A list of scalars is one value to whoever wrote it.
			i := inner[0].path[len(path)].(int)
			bad(fmt.Sprintf("%s must be %s, but item %d is %s", name(path), want(t), i+1, kind(rv.Index(i).Interface())))
			return
		}
		*probs = append(*probs, inner...)
	case reflect.String:
		if _, ok := value.(string); !ok {
			mismatch()
		}
	case reflect.Bool:
		if _, ok := value.(bool); !ok {
			mismatch()
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := value.(int64)
		if !ok {
			mismatch()
			return
		}
		z := reflect.New(t).Elem()
		if z.CanInt() && z.OverflowInt(n) || z.CanUint() && (n < 0 && t.Kind() != reflect.Uint64 && t.Kind() != reflect.Uint || z.OverflowUint(uint64(n))) {
			bad(fmt.Sprintf("%s: %d is out of range", name(path), n))
		}
	case reflect.Float32, reflect.Float64:
		switch value.(type) {
		case int64, float64:
		default:
			mismatch()
		}
	}
}

// checkText checks a value for a type that decodes itself from text: as
// BurntSushi/toml does, a scalar is turned into text and handed to it.
func checkText(bad func(string), mismatch func(), path []any, value any, t reflect.Type) {
	var s string
	switch v := value.(type) {
	case encoding.TextMarshaler: // a date-time
		b, err := v.MarshalText()
		if err != nil {
			mismatch()
			return
		}
		s = string(b)
	case string:
		s = v
	case bool:
		s = fmt.Sprintf("%v", v)
	case int64:
		s = fmt.Sprintf("%d", v)
	case float64:
		s = fmt.Sprintf("%f", v)
	default:
		mismatch()
		return
	}
	err := newText(t).UnmarshalText([]byte(s))
	if err == nil {
		return
	}
	// A string, or an integer where integers can do, is the right kind of
	// value with the wrong contents: say what is wrong with it.
	if _, isString := value.(string); isString {
		bad(fmt.Sprintf("%s: %v", name(path), err))
		return
	}
	if _, isInt := value.(int64); isInt && newText(t).UnmarshalText([]byte("1")) == nil {
		bad(fmt.Sprintf("%s: %v", name(path), err))
		return
	}
	mismatch()
}

func newText(t reflect.Type) encoding.TextUnmarshaler {
	if t.Kind() == reflect.Pointer {
		return reflect.New(t.Elem()).Interface().(encoding.TextUnmarshaler)
	}
	return reflect.New(t).Interface().(encoding.TextUnmarshaler)
}

// field finds the struct field key decodes into, as BurntSushi/toml does:
// the exact name first, else one equal under case folding.
func field(t reflect.Type, key string) (reflect.StructField, bool) {
	fs := Fields(t)
	fold := -1
	for i := range fs {
		if fs[i].Name == key {
			return fs[i].StructField, true
		}
		if fold < 0 && strings.EqualFold(fs[i].Name, key) {
			fold = i
		}
	}
	if fold >= 0 {
		return fs[fold].StructField, true
	}
	return reflect.StructField{}, false
}

// A Field is a key of a TOML table that decodes into a struct.
type Field struct {
	Name string // the key as the file writes it
	reflect.StructField
}

// Fields returns the keys a struct decodes: each exported field by its toml
// tag, or its name when it has none, skipping `toml:"-"`; the fields of an
// embedded struct without a tag are the struct's own.
func Fields(t reflect.Type) []Field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]Field)
	}
	f := fields(t)
	fieldCache.Store(t, f)
	return f
}

var fieldCache sync.Map // reflect.Type → []Field

func fields(t reflect.Type) []Field {
	var out []Field
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if tag == "-" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
			out = append(out, Fields(ft)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		out = append(out, Field{Name: tag, StructField: f})
	}
	return out
}

func scalar(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer && !t.Implements(textUnmarshaler) {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array, reflect.Interface:
		return t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
	}
	return true
}

// want says what a value of Go type t looks like in TOML.
func want(t reflect.Type) string {
	for t.Kind() == reflect.Pointer && !t.Implements(textUnmarshaler) {
		t = t.Elem()
	}
	if t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		if d, ok := newText(t).(Describer); ok {
			return d.TOMLDescription()
		}
		return "a string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "a table"
	case reflect.Slice, reflect.Array:
		if !scalar(t.Elem()) {
			return "a list of tables"
		}
		w := want(t.Elem())
		switch {
		case w == "true or false":
			return "a list of true or false values"
		case strings.HasPrefix(w, "a "), strings.HasPrefix(w, "an "):
			noun, rest, _ := strings.Cut(w[strings.IndexByte(w, ' ')+1:], " ")
			if rest != "" {
				rest = " " + rest
			}
			return "a list of " + noun + "s" + rest
		}
		return "a list"
	}
	return "a value"
}

// kind names the TOML type of a decoded value.
func kind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time:
		return "a date-time"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "tables"
	case []any:
		return "a list"
	}
	return "a date-time" // toml's local date and time types
}

// name is how a message names the key at path: from the innermost table of
// an array of tables (whose line the message has), dotted.
func name(path []any) string {
	start := 0
	for i, p := range path {
		if _, ok := p.(int); ok {
			start = i + 1
		}
	}
	var parts []string
	for _, p := range path[start:] {
		parts = append(parts, quoteKey(p.(string)))
	}
	if len(parts) == 0 && start > 0 {
		return fmt.Sprintf("%s item %d", name(path[:start-1]), path[start-1].(int)+1)
	}
	return strings.Join(parts, ".")
}

func quoteKey(k string) string {
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

func extend(path []any, p any) []any {
	return append(path[:len(path):len(path)], p)
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
