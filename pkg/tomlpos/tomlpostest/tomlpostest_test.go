package tomlpostest

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The types of pkg/tomlpos's decode_test.go: every kind of value a key
// may hold.

// span is a duration written as a string, like operations.Duration.
type span struct{ time.Duration }

func (s *span) UnmarshalText(b []byte) error {
	d, err := time.ParseDuration(string(b))
	s.Duration = d
	return err
}

// bytesize takes an integer or a string with a unit, like operations.Size.
type bytesize int64

func (s *bytesize) UnmarshalText(b []byte) error {
	n, err := strconv.ParseInt(strings.TrimSuffix(string(b), "KiB"), 10, 64)
	*s = bytesize(n)
	return err
}

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

func TestPaths(t *testing.T) {
	got := strings.Join(Paths(reflect.TypeFor[file]()), " ")
	want := "title item.name item.tags item.count item.small item.on item.wait item.size item.sub.level item.sub.note item.subs.NAME.level item.subs.NAME.note item.vars item.ratio item.parts.level item.parts.note"
	if got != want {
		t.Errorf("Paths =\n%s\nwant\n%s", got, want)
	}
}
