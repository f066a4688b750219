package tomlpos

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// span is a duration written as a string, like operations.Duration.
type span struct{ time.Duration }

func (s *span) UnmarshalText(b []byte) error {
	d, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q", b)
	}
	s.Duration = d
	return nil
}

func (span) TOMLDescription() string { return `a duration string such as "2m"` }

// bytesize takes an integer or a string with a unit, like operations.Size.
type bytesize int64

func (s *bytesize) UnmarshalText(b []byte) error {
	n, err := strconv.ParseInt(strings.TrimSuffix(string(b), "KiB"), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("invalid size %q", b)
	}
	*s = bytesize(n)
	return nil
}

func (bytesize) TOMLDescription() string { return `a size such as "64KiB" or 1024` }

type item struct {
	Name    string            `toml:"name"`
	Tags    []string          `toml:"tags"`
	Count   int               `toml:"count"`
	Small   int8              `toml:"small"`
	On      *bool             `toml:"on"`
	Wait    *span             `toml:"wait"`
	Size    bytesize          `toml:"size"`
	Sub     sub               `toml:"sub"`
	Subs    map[string]sub    `toml:"subs"`
	Vars    map[string]string `toml:"vars"`
	Ratio   float64           `toml:"ratio"`
	Parts   []sub             `toml:"parts"`
	Ignored string            `toml:"-"`
}

type sub struct {
	Level int    `toml:"level"`
	Note  string `toml:"note"`
}

type file struct {
	Title string `toml:"title"`
	Item  []item `toml:"item"`
}

// TestDecodeTypeErrors: each kind of value in the wrong place is named at
// its own line, in words, in whichever [[item]] it is. BurntSushi/toml
// names the line of the same key in the last [[item]].
func TestDecodeTypeErrors(t *testing.T) {
	// The last item sets every key, so that BurntSushi/toml's line would
	// be there.
	last := "\n[[item]]\nname = \"z\"\ntags = [\"z\"]\ncount = 1\nsmall = 1\non = true\nwait = \"1m\"\nsize = 1\nratio = 1.5\nsub = { level = 1, note = \"n\" }\nvars = { A = \"a\" }\n[item.subs.s]\nlevel = 1\n[[item.parts]]\nlevel = 2\n"
	for _, tc := range []struct {
		name, src, want string
		line            int
	}{
		{"string as an integer", "[[item]]\nname = 1\n", "name must be a string, not an integer", 2},
		{"string as a boolean", "[[item]]\n\nname = false\n", "name must be a string, not a boolean", 3},
		{"string as a date-time", "[[item]]\nname = 1979-05-27T07:32:00Z\n", "name must be a string, not a date-time", 2},
		{"string as a local date", "[[item]]\nname = 1979-05-27\n", "name must be a string, not a date-time", 2},
		{"list as a string", "[[item]]\nname = \"a\"\ntags = \"a\"\n", "tags must be a list of strings, not a string", 3},
		{"list item", "[[item]]\ntags = [\n  \"a\",\n  3,\n]\n", "tags must be a list of strings, but item 2 is an integer", 2},
		{"integer as a string", "[[item]]\ncount = \"3\"\n", "count must be an integer, not a string", 2},
		{"integer as a float", "[[item]]\ncount = 3.0\n", "count must be an integer, not a float", 2},
		{"integer out of range", "[[item]]\nsmall = 300\n", "small: 300 is out of range", 2},
		{"bool as a string", "[[item]]\non = \"yes\"\n", "on must be true or false, not a string", 2},
		{"duration as an integer", "[[item]]\nwait = 60\n", `wait must be a duration string such as "2m", not an integer`, 2},
		{"duration that is none", "[[item]]\nwait = \"soon\"\n", `wait: invalid duration "soon"`, 2},
		{"duration as a table", "[[item]]\nwait = { m = 2 }\n", `wait must be a duration string such as "2m", not a table`, 2},
		{"size as a negative integer", "[[item]]\nsize = -1\n", `size: invalid size "-1"`, 2},
		{"size as a list", "[[item]]\nsize = [1]\n", `size must be a size such as "64KiB" or 1024, not a list`, 2},
		{"float as a string", "[[item]]\nratio = \"1/2\"\n", "ratio must be a number, not a string", 2},
		{"table as a string", "[[item]]\nsub = \"x\"\n", "sub must be a table, not a string", 2},
		{"in an inline table", "[[item]]\nsub = { note = 1 }\n", "sub.note must be a string, not an integer", 2},
		{"dotted key", "[[item]]\nsub.level = \"1\"\n", "sub.level must be an integer, not a string", 2},
		{"in a sub-table", "[[item]]\n[item.sub]\nnote = \"n\"\nlevel = \"1\"\n", "sub.level must be an integer, not a string", 4},
		{"map entry", "[[item]]\n[item.subs.a]\nlevel = 1\n[item.subs.b]\nlevel = []\n", "subs.b.level must be an integer, not a list", 5},
		{"map of strings", "[[item]]\nvars = { A = \"a\", B = 2 }\n", "vars.B must be a string, not an integer", 2},
		{"map as a string", "[[item]]\nvars = \"A=a\"\n", "vars must be a table, not a string", 2},
		{"map as an empty list", "[[item]]\nsubs = []\n", "subs must be a table, not a list", 2},
		{"array of tables in an array of tables", "[[item]]\n[[item.parts]]\nlevel = 1\n[[item.parts]]\nlevel = \"2\"\n", "level must be an integer, not a string", 5},
		{"list of tables as a string", "[[item]]\nparts = \"p\"\n", "parts must be a list of tables, not a string", 2},
		{"quoted key", "[[item]]\n\"name\" = 2\n", "name must be a string, not an integer", 2},
		{"case folded key", "[[item]]\nNAME = 2\n", "NAME must be a string, not an integer", 2},
		{"key text inside a string", "[[item]]\nname = \"count = 1\"\n# count = 2\ncount = \"x\"\n", "count must be an integer, not a string", 4},
		{"the first of two in the file", "[[item]]\nname = \"a\"\ncount = \"x\"\ntags = 1\n", "count must be an integer, not a string", 3},
		{"top-level", "title = 1\n[[item]]\n", "title must be a string, not an integer", 1},
		{"top-level table of tables", "item = 1\n", "item must be a list of tables, not an integer", 1},
		{"inline array of tables", "item = [\n  { name = \"a\" },\n  { name = 2 },\n]\n", "name must be a string, not an integer", 3},
	} {
		for _, where := range []struct {
			name       string
			before     string
			lineOffset int
		}{{"first", "", 0}, {"middle", "[[item]]\nname = \"a\"\n\n", 3}} {
			if strings.HasPrefix(tc.src, "item = ") || strings.HasPrefix(tc.src, "title") {
				if where.name != "first" {
					continue
				}
			}
			t.Run(tc.name+"/"+where.name, func(t *testing.T) {
				src := where.before + tc.src
				if !strings.HasPrefix(tc.src, "item = ") {
					src += last
				}
				var f file
				err := Decode([]byte(src), &f)
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("Decode = %v, want an *Error\n%s", err, src)
				}
				if e.Msg != tc.want || e.Line != tc.line+where.lineOffset {
					t.Errorf("Decode = line %d: %s\nwant   line %d: %s\n%s", e.Line, e.Msg, tc.line+where.lineOffset, tc.want, src)
				}
			})
		}
	}
}

// TestDecode: what BurntSushi/toml accepts is accepted; a syntax error and
// an unknown key keep their lines.
func TestDecode(t *testing.T) {
	var f file
	if err := Decode([]byte("title = \"t\"\n[[item]]\nname = \"a\"\nsize = \"2KiB\"\nwait = \"1m\"\nsubs = {}\n[item.vars]\n"), &f); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if len(f.Item) != 1 || f.Item[0].Size != 2 || f.Item[0].Wait.Duration != time.Minute {
		t.Fatalf("decoded %+v", f)
	}
	for _, tc := range []struct {
		src, want string
		line      int
	}{
		{"[[item]]\nname = \"a\n", "", 2},
		{"[[item]]\nname = \"a\"\n\n[[item]]\nnmae = \"b\"\n", `unknown key "item.nmae"`, 5},
	} {
		err := Decode([]byte(tc.src), &f)
		var e *Error
		if !errors.As(err, &e) || e.Line != tc.line || !strings.Contains(e.Msg, tc.want) {
			t.Errorf("Decode(%q) = %v, want line %d: %s", tc.src, err, tc.line, tc.want)
		}
	}
}

// FuzzDecode: Decode never panics; an error is an *Error whose line is in
// the file, and BurntSushi/toml alone decides what is accepted.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"[[item]]\nname = 1\n[[item]]\nname = \"b\"\n",
		"item = [{ name = 2 }, { tags = \"x\" }]\n",
		"[[item]]\n[item.subs.a]\nlevel = \"1\"\n[[item.parts]]\nnote = 1\n",
		"[[item]]\nvars = \"x\"\nwait = 60\nsize = -1\n",
		"[[item]]\n\"na\\u006de\" = 1\n'tags' = \"x\"\n",
		"title = 1979-05-27\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		var v file
		err := Decode([]byte(src), &v)
		if err == nil {
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v is not an *Error", err)
		}
		if e.Line < 0 || e.Line > strings.Count(src, "\n")+1 {
			t.Fatalf("line %d of a %d-line file: %v", e.Line, strings.Count(src, "\n")+1, err)
		}
	})
}
