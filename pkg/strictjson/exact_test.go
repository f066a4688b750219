package strictjson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

type exInner struct {
	A int `json:"a"`
}

type exEmbedded struct {
	exInner
	B int `json:"b"`
}

type exDup struct {
	A int
	X int `json:"A,omitempty"`
}

// exShadow's own B and exEmbedded's B share a name: encoding/json picks
// the shallower, Check the first; not exact.
type exShadow struct {
	exEmbedded
	B string `json:"b"`
}

type exNested struct {
	Items []*exEmbedded `json:"items"`
}

type exPlain struct {
	A    int                `json:"a"`
	M    map[string]exInner `json:"m"`
	Self *exPlain           `json:"self"`
}

// exact decides whether Unmarshal may rely on Check alone for unknown
// fields: a type Check's field names only approximate must not be exact.
func TestExact(t *testing.T) {
	for _, c := range []struct {
		v    any
		want bool
	}{
		{exPlain{}, true},
		{exInner{}, true},
		{exEmbedded{}, true},
		{exDup{}, false},
		{exNested{}, true},
		{exShadow{}, false},
	} {
		if got := exact(reflect.TypeOf(c.v)); got != c.want {
			t.Errorf("exact(%T) = %v, want %v", c.v, got, c.want)
		}
	}
}

// Unknown and ambiguous keys are refused whichever way Unmarshal decodes.
func TestUnmarshalUnknownFields(t *testing.T) {
	var p exPlain
	if err := Unmarshal([]byte(`{"a":1,"zz":2}`), &p); err == nil {
		t.Error("unknown key accepted (exact type)")
	}
	var d exDup
	// Two fields named "A": not exact, so a Decoder decodes it, as
	// encoding/json resolves it (the tagged field wins).
	if err := Unmarshal([]byte(`{"A":1}`), &d); err != nil || d.X != 1 || d.A != 0 {
		t.Errorf("duplicate names: %v %+v", err, d)
	}
	var e exEmbedded
	if err := Unmarshal([]byte(`{"a":1,"b":2}`), &e); err != nil || e.A != 1 || e.B != 2 {
		t.Errorf("embedded: %v %+v", err, e)
	}
}

// A shadowed key decodes as encoding/json reads it (the shallower field).
func TestUnmarshalShadowed(t *testing.T) {
	var s exShadow
	if err := Unmarshal([]byte(`{"a":1,"b":"x"}`), &s); err != nil || s.B != "x" || s.A != 1 {
		t.Errorf("shadowed: %v %+v", err, s)
	}
	if err := Unmarshal([]byte(`{"a":1,"c":"x"}`), &s); err == nil {
		t.Error("unknown key accepted (not exact)")
	}
}

type exRecord struct {
	exEmbedded
	Name  string             `json:"name"`
	Tags  []string           `json:"tags,omitempty"`
	Attrs map[string]exPlain `json:"attrs"`
	N     *float64           `json:"n"`
}

// FuzzDecodeChecked holds the json.Unmarshal path of DecodeChecked equal
// to a Decoder refusing unknown fields, for every input Check accepts.
func FuzzDecodeChecked(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":2,"name":"x","tags":["t"],"attrs":{"k":{"a":3,"self":null}},"n":1.5}`, `{"A":1}`, `{"a":1,"zz":0}`, `{"attrs":{"k":{"m":{"q":{"a":1}}}}}`, `{"name":"\u00e9"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if Check(data, (*exRecord)(nil)) != nil {
			return
		}
		var a, b exRecord
		errA := DecodeChecked(data, (*exRecord)(nil), &a)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		errB := dec.Decode(&b)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("json.Unmarshal path: %v; Decoder: %v", errA, errB)
		}
		if errA == nil && !reflect.DeepEqual(a, b) {
			t.Fatalf("json.Unmarshal path %+v; Decoder %+v", a, b)
		}
	})
}

type exQ1 struct{ Q int }

type exQ2 struct{ Q int }

// exAmbiguous promotes "Q" from two structs at one depth: encoding/json
// drops both, so a payload's "Q" would be silently ignored.
type exAmbiguous struct {
	exQ1
	exQ2
}

// A key encoding/json drops as ambiguous is refused, not ignored: Check
// accepts it (a field has that name), the Decoder's DisallowUnknownFields
// refuses it.
func TestUnmarshalAmbiguous(t *testing.T) {
	if exact(reflect.TypeFor[exAmbiguous]()) {
		t.Fatal("exAmbiguous is exact")
	}
	var v exAmbiguous
	if err := Unmarshal([]byte(`{"Q":1}`), &v); err == nil {
		t.Errorf("a key encoding/json drops was accepted: %+v", v)
	}
}
