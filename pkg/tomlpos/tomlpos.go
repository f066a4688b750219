// Package tomlpos finds where things are in a TOML file: BurntSushi/toml
// reports positions for syntax errors but keeps key positions private, and
// an error about a key must still name its file and line (SPEC §9).
package tomlpos

import (
	"bytes"
	"regexp"

	"github.com/BurntSushi/toml"
)

// CodeLines returns the file's lines with the contents of strings (basic,
// literal and multi-line) and comments blanked out, so that scanning for
// keys and headers never matches text inside a value.
func CodeLines(data []byte) []string {
	var out []string
	var cur []byte
	var quote string // the open string's delimiter, if any
	b := data
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '\n' {
			out = append(out, string(cur))
			cur = cur[:0]
			if len(quote) == 1 {
				quote = "" // a one-line string cannot span lines
			}
			continue
		}
		if quote != "" {
			if c == '\\' && quote[0] == '"' && i+1 < len(b) && b[i+1] != '\n' {
				i++
				cur = append(cur, ' ', ' ')
				continue
			}
			if bytes.HasPrefix(b[i:], []byte(quote)) {
				i += len(quote) - 1
				cur = append(cur, quote...)
				quote = ""
				continue
			}
			cur = append(cur, ' ')
			continue
		}
		switch {
		case c == '#':
			for i < len(b) && b[i] != '\n' {
				i++
			}
			i--
		case c == '"' || c == '\'':
			q := string(c)
			if bytes.HasPrefix(b[i:], []byte(q+q+q)) {
				q = q + q + q
			}
			quote = q
			i += len(q) - 1
			cur = append(cur, q...)
		default:
			cur = append(cur, c)
		}
	}
	return append(out, string(cur))
}

// KeyLine finds the line defining key k. BurntSushi/toml keeps key positions
// private, so this counts how many earlier keys share k's last name and
// returns the line of that occurrence of the name in the file, looking only
// at code, never inside strings or comments.
func KeyLine(data []byte, all []toml.Key, k toml.Key) int {
	last := k[len(k)-1]
	nth := 0
	for _, other := range all {
		if other.String() == k.String() {
			break
		}
		if other[len(other)-1] == last {
			nth++
		}
	}
	re := regexp.MustCompile(`(^|[\s{,.\[])("` + regexp.QuoteMeta(last) + `"|'` + regexp.QuoteMeta(last) + `'|` + regexp.QuoteMeta(last) + `)\s*(=|\]|\.)`)
	for i, code := range CodeLines(data) {
		for range re.FindAllStringIndex(code, -1) {
			if nth == 0 {
				return i + 1
			}
			nth--
		}
	}
	return 0
}
