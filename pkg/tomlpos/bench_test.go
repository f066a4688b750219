package tomlpos

import (
	"strings"
	"testing"
)

func BenchmarkCodeLinesLongString(b *testing.B) {
	src := []byte(strings.Repeat("a = \""+strings.Repeat("x", 200)+"\"\n", 200))
	b.ReportAllocs()
	for b.Loop() {
		CodeLines(src)
	}
}
