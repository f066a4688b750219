package strictjson

import "reflect"

// Exact reports whether [DecodeChecked] with as of v's type decodes with
// json.Unmarshal (see there).
func Exact(v any) bool {
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return exact(t)
}
