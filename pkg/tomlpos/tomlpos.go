// Package tomlpos finds where things are in a TOML file: BurntSushi/toml
// reports positions for syntax errors but keeps key positions private, and
// an error about a key must still name its file and line (docs/DESIGN.md §9).
package tomlpos

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

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

// KeyLine returns the line defining key k, the first of all (the file's
// keys, as [toml.MetaData.Keys] lists them) equal to k, or 0 when it
// cannot be found.
func KeyLine(data []byte, all []toml.Key, k toml.Key) int {
	for i, other := range all {
		if other.String() == k.String() {
			return keyLines(data, all[:i+1])[i]
		}
	}
	return 0
}

// A token is a key as written: a bare or quoted name followed by =, . or
// (in a table header) ], at a line and the column after it.
type token struct {
	name        string
	line, end   int
	arrayHeader bool // on a [[table]] line
}

// tokens returns the keys written in data, in file order, looking only at
// code, never inside strings or comments. It sees more than keys (a number
// before a decimal point, say) but never misses one written on one line.
func tokens(data []byte) []token {
	var out []token
	orig := strings.Split(string(data), "\n")
	for l, code := range CodeLines(data) {
		header := strings.HasPrefix(strings.TrimSpace(code), "[")
		arrayHeader := strings.HasPrefix(strings.TrimSpace(code), "[[")
		for p := 0; p < len(code); p++ {
			if p > 0 && !strings.ContainsRune(" \t{,.[", rune(code[p-1])) {
				continue
			}
			var name string
			end := p
			switch c := code[p]; {
			case isBare(c):
				for end < len(code) && isBare(code[end]) {
					end++
				}
				name = code[p:end]
			case c == '"' || c == '\'':
				q := strings.IndexByte(code[p+1:], c)
				if q < 0 || l >= len(orig) || len(orig[l]) < p+q+2 {
					continue
				}
				end = p + q + 2
				raw := orig[l][p:end]
				name = raw[1 : len(raw)-1]
				if c == '"' {
					if u, err := strconv.Unquote(raw); err == nil {
						name = u
					}
				}
			default:
				continue
			}
			rest := strings.TrimLeft(code[end:], " \t")
			switch {
			case strings.HasPrefix(rest, "="), strings.HasPrefix(rest, "."),
				strings.HasPrefix(rest, "]") && header && !strings.Contains(code[:p], "="):
				out = append(out, token{name: name, line: l + 1, end: end, arrayHeader: arrayHeader})
			}
			p = end - 1
		}
	}
	return out
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// keyLines returns the line of each of keys, the file's keys as
// [toml.MetaData.Keys] lists them: in file order, one for each table header
// and each key written, with no entry for a table only implied by a longer
// key. BurntSushi/toml keeps key positions private, so each key is matched
// to the next written key with its last name after the previous key's: a
// key's prefixes are written before its last name, so they are passed over
// with it. A key not found (0) leaves the cursor where it was.
func keyLines(data []byte, keys []toml.Key) []int {
	toks, at := keyTokens(data, keys)
	out := make([]int, len(keys))
	for i, j := range at {
		if j >= 0 {
			out[i] = toks[j].line
		}
	}
	return out
}

// keyTokens returns the written keys and, for each of keys, the index of
// its own among them (-1 when not found).
func keyTokens(data []byte, keys []toml.Key) ([]token, []int) {
	byName := map[string][]int{} // name → indexes into toks
	toks := tokens(data)
	for i, t := range toks {
		byName[t.name] = append(byName[t.name], i)
	}
	out := make([]int, len(keys))
	cursor := -1
	for i, k := range keys {
		out[i] = -1
		if len(k) == 0 {
			continue
		}
		list := byName[k[len(k)-1]]
		j := sort.SearchInts(list, cursor+1)
		if j < len(list) {
			cursor = list[j]
			out[i] = cursor
		}
	}
	return toks, out
}

// A locator finds the line of a value by its path: keys (string) and
// indexes (int) into arrays.
type locator struct {
	lines map[string]int // indexed path → line
	md    toml.MetaData
}

func newLocator(data []byte, md toml.MetaData) *locator {
	keys := md.Keys()
	toks, at := keyTokens(data, keys)
	loc := &locator{lines: map[string]int{}, md: md}
	count := map[string]int{} // [[table]] → how many so far
	// An inline array of tables lists its tables' keys with nothing
	// between them: a table ends where a key of it comes again.
	type inlineArray struct {
		index int
		seen  map[string]bool
	}
	inline := map[string]*inlineArray{}
	for i, k := range keys {
		ks := k.String()
		// md.Type is the type of a key's last definition: whether this
		// one is a [[table]] its line says.
		header := at[i] >= 0 && toks[at[i]].arrayHeader
		switch typ := md.Type(k...); {
		case typ == "ArrayHash" && header:
			count[ks]++
			for other := range count {
				if strings.HasPrefix(other, ks+".") {
					delete(count, other)
				}
			}
		case typ == "Array":
			inline[ks] = &inlineArray{seen: map[string]bool{}}
		}
		if len(k) > 1 {
			if a := inline[k[:len(k)-1].String()]; a != nil {
				if a.seen[k[len(k)-1]] {
					a.index++
					clear(a.seen)
				}
				a.seen[k[len(k)-1]] = true
			}
		}
		var b strings.Builder
		for j := range k {
			b.WriteString(k[j] + "\x00")
			if j == len(k)-1 {
				break
			}
			p := k[:j+1].String()
			if n := count[p]; n > 0 {
				fmt.Fprintf(&b, "[%d]\x00", n-1)
			} else if a := inline[p]; a != nil {
				fmt.Fprintf(&b, "[%d]\x00", a.index)
			}
		}
		if header {
			fmt.Fprintf(&b, "[%d]\x00", count[ks]-1)
		}
		if _, seen := loc.lines[b.String()]; !seen && at[i] >= 0 {
			loc.lines[b.String()] = toks[at[i]].line
		}
	}
	return loc
}

// line returns the line of the value at path, or of the nearest table or
// array holding it that has one, or 0.
func (loc *locator) line(path []any) int {
	var parts []string
	var key toml.Key
walk:
	for _, p := range path {
		switch p := p.(type) {
		case string:
			key = append(key, p)
			parts = append(parts, p+"\x00")
		case int:
			if t := loc.md.Type(key...); t != "ArrayHash" && t != "Array" {
				break walk
			}
			parts = append(parts, fmt.Sprintf("[%d]\x00", p))
		}
	}
	for n := len(parts); n > 0; n-- {
		if line, ok := loc.lines[strings.Join(parts[:n], "")]; ok {
			return line
		}
	}
	return 0
}
