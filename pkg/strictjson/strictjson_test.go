package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

type embedded struct {
	E bool `json:"e"`
}

type inner struct {
	A int            `json:"a"`
	B *string        `json:"b,omitempty"`
	M map[string]int `json:"m"`
}

type outer struct {
	embedded
	ExitCode int             `json:"exit_code"`
	Name     string          `json:"name"`
	In       *inner          `json:"in"`
	List     []inner         `json:"list"`
	T        time.Time       `json:"t"`
	Raw      json.RawMessage `json:"raw"`
	Any      any             `json:"any"`
	Untagged int
	skipped  int
	Dash     int `json:"-"`
}

// The unexported field is there to be refused as a key; this keeps it
// from looking unused.
var _ = outer{}.skipped

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"plain", `{"exit_code":1,"name":"x","in":{"a":1,"m":{"k":2}},"list":[{"a":2}],"t":"2024-01-01T00:00:00Z","raw":{"x":[1]},"any":null,"e":true,"Untagged":3}`, true},
		{"empty", `{}`, true},
		{"duplicate key", `{"exit_code":1,"exit_code":0}`, false},
		{"case-folded key", `{"exit_code":1,"EXIT_CODE":0}`, false},
		{"case-folded only", `{"Exit_Code":1}`, false},
		{"escaped duplicate", `{"name":"a","n\u0061me":"b"}`, false},
		{"escaped key is the field", `{"n\u0061me":"b"}`, true},
		{"duplicate in nested struct", `{"in":{"a":1,"a":2}}`, false},
		{"duplicate in a map", `{"in":{"m":{"k":1,"k":2}}}`, false},
		{"duplicate in raw", `{"raw":{"x":1,"x":2}}`, false},
		{"duplicate in any", `{"any":{"x":1,"x":2}}`, false},
		{"duplicate among many keys", `{"any":{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"l":1,"m":1,"n":1,"o":1,"p":1,"q":1,"r":1,"a":2}}`, false},
		{"map keys are free", `{"in":{"m":{"K":1,"k":2}}}`, true},
		{"unknown key", `{"other":1}`, false},
		{"dash field", `{"Dash":1}`, false},
		{"unexported field", `{"skipped":1}`, false},
		{"trailing object", `{"name":"a"}{"name":"b"}`, false},
		{"trailing newline", "{\"name\":\"a\"}\n", false},
		{"leading space", " {}", false},
		{"inner whitespace", "{ \"name\" : \"a\" ,\n\"exit_code\":1 }", true},
		{"null int", `{"exit_code":null}`, false},
		{"null string", `{"name":null}`, false},
		{"null time", `{"t":null}`, false},
		{"null pointer", `{"in":null}`, true},
		{"null slice", `{"list":null}`, true},
		{"null raw", `{"raw":null}`, true},
		{"invalid utf-8", "{\"name\":\"\xff\"}", false},
		{"lone high surrogate", `{"name":"\ud800"}`, false},
		{"lone low surrogate", `{"name":"\udc00x"}`, false},
		{"surrogate pair", `{"name":"\ud83d\ude00"}`, true},
		{"escaped backslash then u", `{"name":"\\ud800"}`, true},
		{"control character", "{\"name\":\"a\tb\"}", false},
		{"bad number", `{"exit_code":01}`, false},
		{"truncated", `{"name":"a"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check([]byte(tc.in), (*outer)(nil))
			if (err == nil) != tc.ok {
				t.Fatalf("Check(%s) = %v, want ok %v", tc.in, err, tc.ok)
			}
			if err := reference([]byte(tc.in), reflect.TypeFor[outer]()); (err == nil) != tc.ok {
				t.Fatalf("reference(%s) = %v, want ok %v", tc.in, err, tc.ok)
			}
			if e := (*Error)(nil); err != nil && !errors.As(err, &e) {
				t.Fatalf("error %v is not a strictjson.Error", err)
			}
		})
	}
}

// FuzzCheck holds Check equal to reference, an independent strict reader
// built on encoding/json's own validator and token stream plus explicit
// checks of what encoding/json lets through.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"exit_code":1,"name":"x","in":{"a":1,"m":{"k":2}},"list":[{"a":2}],"t":"2024-01-01T00:00:00Z","raw":{"x":[1]},"any":null,"e":true}`,
		`{"exit_code":1,"EXIT_CODE":0}`, `{"a":1,"a":2}`, `{"name":"\ud800"}`, `{"name":"\\ud800"}`, `{"in":null}`, `{"exit_code":null}`,
		`{}{}`, `[1,2,{"x":null}]`, `"s"`, `1.5e3`, `{"any":{"X":1,"x":1}}`, "{\"name\":\"\xc3\x28\"}", `{"n\u0061me":1}`,
	} {
		f.Add([]byte(s))
	}
	typ := reflect.TypeFor[outer]()
	f.Fuzz(func(t *testing.T, data []byte) {
		got := Check(data, (*outer)(nil))
		want := reference(data, typ)
		if (got == nil) != (want == nil) {
			t.Fatalf("%q: Check says %v, the reference %v", data, got, want)
		}
		gotAny, wantAny := Check(data, nil), reference(data, nil)
		if (gotAny == nil) != (wantAny == nil) {
			t.Fatalf("%q untyped: Check says %v, the reference %v", data, gotAny, wantAny)
		}
	})
}

// reference accepts data when encoding/json finds it valid, it has nothing
// around the value, every string is UTF-8 with no lone surrogate, no object
// repeats a key, and the decoded tree fits typ's exact field names and
// nullability (typ nil: any).
func reference(data []byte, typ reflect.Type) error {
	if !json.Valid(data) {
		return errors.New("invalid JSON")
	}
	if len(bytes.TrimSpace(data)) != len(data) {
		return errors.New("whitespace around the value")
	}
	if !utf8.Valid(data) {
		return errors.New("invalid UTF-8")
	}
	if err := surrogates(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		obj  bool
		keys map[string]bool
		key  bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if k, isKey := tok.(string); isKey && top != nil && top.obj && top.key {
			if top.keys[k] {
				return errors.New("duplicate key " + strconv.Quote(k))
			}
			top.keys[k] = true
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, keys: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].key = true
		}
	}
	var tree any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&tree); err != nil {
		return err
	}
	if typ == nil {
		return nil
	}
	return fits(tree, typ)
}

func surrogates(data []byte) error {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		if data[i+1] != 'u' {
			i++
			continue
		}
		r, _ := strconv.ParseUint(string(data[i+2:i+6]), 16, 32)
		i += 5
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return errors.New("lone low surrogate")
		case r >= 0xd800 && r <= 0xdbff:
			if i+6 >= len(data) || data[i+1] != '\\' || data[i+2] != 'u' {
				return errors.New("lone high surrogate")
			}
			lo, _ := strconv.ParseUint(string(data[i+3:i+7]), 16, 32)
			if lo < 0xdc00 || lo > 0xdfff {
				return errors.New("lone high surrogate")
			}
			i += 6
		}
	}
	return nil
}

// fits walks a decoded tree along typ.
func fits(v any, typ reflect.Type) error {
	nullable := false
	for typ.Kind() == reflect.Pointer {
		typ, nullable = typ.Elem(), true
	}
	switch typ.Kind() {
	case reflect.Interface:
		return nil
	case reflect.Slice, reflect.Map:
		nullable = true
	}
	if typ == reflect.TypeFor[json.RawMessage]() {
		return nil
	}
	if v == nil {
		if !nullable {
			return errors.New("null for " + typ.String())
		}
		return nil
	}
	if typ == reflect.TypeFor[time.Time]() {
		return nil
	}
	switch typ.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		names := map[string]reflect.Type{}
		for _, f := range reflect.VisibleFields(typ) {
			if f.Anonymous || !f.IsExported() {
				continue
			}
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			names[name] = f.Type
		}
		for k, x := range obj {
			ft, ok := names[k]
			if !ok {
				return errors.New("not a field: " + k)
			}
			if err := fits(x, ft); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if arr, ok := v.([]any); ok && typ.Elem().Kind() != reflect.Uint8 {
			for _, x := range arr {
				if err := fits(x, typ.Elem()); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if obj, ok := v.(map[string]any); ok {
			for _, x := range obj {
				if err := fits(x, typ.Elem()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func BenchmarkCheck(b *testing.B) {
	data := []byte(`{"exit_code":1,"name":"some name here","in":{"a":1,"m":{"k":2,"l":3}},"list":[{"a":2},{"a":3}],"t":"2024-01-01T00:00:00Z","raw":{"x":[1,2,3,"abc"]},"any":null,"e":true}`)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := Check(data, (*outer)(nil)); err != nil {
			b.Fatal(err)
		}
	}
}
