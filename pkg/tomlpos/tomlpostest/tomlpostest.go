// Package tomlpostest lists the keys a TOML file accepts, for the tests
// that hold docs/CONFIG.md to the types the files decode into. It is for
// tests only.
package tomlpostest

import (
	"encoding"
	"reflect"
	"strings"

	"github.com/prod-write/prod-write/pkg/tomlpos"
)

// Paths returns every key a TOML file decoding into t accepts (by
// tomlpos.Decode), dotted, with NAME standing for a key of a map of tables
// (params.NAME.min) and tables that hold keys of their own left out; a
// table of tables ([[operation]]) gives its tables' keys. docs/CONFIG.md
// is checked against it.
func Paths(t reflect.Type) []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for t.Kind() == reflect.Pointer && !t.Implements(textUnmarshaler) {
			t = t.Elem()
		}
		text := t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
		switch {
		case !text && t.Kind() == reflect.Struct:
			for _, f := range tomlpos.Fields(t) {
				walk(prefix+f.Name+".", f.Type)
			}
			return
		case !text && t.Kind() == reflect.Map && !scalar(t.Elem()):
			walk(prefix+"NAME.", t.Elem())
			return
		case !text && t.Kind() == reflect.Slice && !scalar(t.Elem()) && t.Elem().Kind() != reflect.Slice:
			walk(prefix, t.Elem())
			return
		}
		out = append(out, strings.TrimSuffix(prefix, "."))
	}
	walk("", t)
	return out
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// scalar reports whether a value of type t is written as a value in TOML,
// not as a table: the rule of pkg/tomlpos's decoder (decode.go), which a
// key's path follows.
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
