package mcpserver

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxPatternLen bounds a translated pattern: past it, a schema read by a
// model in every tools/list would carry a wall of character ranges, and
// the pattern is left to the description instead.
const maxPatternLen = 1024

// ecmaPattern translates a registry pattern (Go RE2 syntax, matched against
// the whole value) into a JSON Schema pattern that accepts exactly the same
// strings, and reports whether it could.
//
// JSON Schema patterns are ECMA-262 regular expressions, built with the u
// flag (JSON Schema 2020-12 §6.4), matched anywhere in the value. RE2 text
// copied into one means something else or nothing: ajv rejects `(?i)`,
// `\pL`, `\z` and `(?P<n>…)` and with them the whole schema, and
// `[[:alpha:]]` is, in ECMA-262, the class of `[`, `:`, `a`, `l`, `p` and
// `h` followed by a `]` (a syntax error with the u flag). So the
// pattern is not copied: it is parsed by Go's own parser, as the registry
// compiles it, and each node is written out in a part of ECMA-262 that
// means the same with the u flag and, for characters of the Basic
// Multilingual Plane, without it:
//
//   - character classes (named, Perl, Unicode, case-folded) as explicit
//     ranges, so `\s` is Go's five spaces and not ECMA-262's two dozen, and
//     `(?i)k` is [Kk\u212A] whatever the engine's case folding;
//   - `.` as [^\n] (ECMA-262's `.` also excludes \r, U+2028 and U+2029);
//   - `^` and `$` of the whole value, and the line anchors of (?m) as
//     lookarounds on \n alone;
//   - groups, capturing or named, as (?:…): a pattern only accepts or
//     rejects, and `(?<n>…)` is not read by every validator;
//   - non-ASCII characters of the Basic Multilingual Plane as \uXXXX.
//
// It cannot when a class holds some but not all characters beyond U+FFFF
// (\pL does): without the u flag an engine sees those as surrogate pairs,
// and no class of them reads the same with and without it. Nor when the translation
// is longer than maxPatternLen. The caller then leaves the pattern out of the
// schema and says so; the registry checks every value either way.
func ecmaPattern(re2 string) (string, bool) {
	re, err := syntax.Parse(`^(?:`+re2+`)$`, syntax.Perl)
	if err != nil {
		return "", false
	}
	w := ecmaWriter{ok: true}
	w.node(re)
	if !w.ok || w.b.Len() > maxPatternLen || pairedSurrogates(w.b.String()) {
		return "", false
	}
	return w.b.String(), true
}

// pairedSurrogates reports whether out has a lead surrogate's escape right
// before a trail surrogate's: with the u flag the two read as one
// character beyond U+FFFF, without it as two. Go strings hold no
// surrogates, so only a pattern that names them bare gets here.
func pairedSurrogates(out string) bool {
	for i := 0; ; i++ {
		j := strings.Index(out[i:], `\u`)
		if j < 0 {
			return false
		}
		i += j
		if len(out) >= i+12 && isHexSurrogate(out[i+2:i+6], 'D', "89AB") && out[i+6:i+8] == `\u` && isHexSurrogate(out[i+8:i+12], 'D', "CDEF") {
			return true
		}
	}
}

func isHexSurrogate(hex string, first byte, second string) bool {
	return hex[0] == first && strings.IndexByte(second, hex[1]) >= 0
}

type ecmaWriter struct {
	b  strings.Builder
	ok bool
}

func (w *ecmaWriter) node(re *syntax.Regexp) {
	switch re.Op {
	case syntax.OpNoMatch:
		w.b.WriteString(`(?!)`)
	case syntax.OpEmptyMatch:
		w.b.WriteString(`(?:)`)
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			w.literal(r, re.Flags&syntax.FoldCase != 0)
		}
	case syntax.OpCharClass:
		w.class(re.Rune)
	case syntax.OpAnyCharNotNL:
		w.b.WriteString(`[^\n]`)
	case syntax.OpAnyChar:
		w.b.WriteString(`[\s\S]`)
	case syntax.OpBeginLine:
		w.b.WriteString(`(?<![^\n])`)
	case syntax.OpEndLine:
		w.b.WriteString(`(?![^\n])`)
	case syntax.OpBeginText:
		w.b.WriteString(`^`)
	case syntax.OpEndText:
		w.b.WriteString(`$`)
	case syntax.OpWordBoundary:
		w.b.WriteString(`\b`)
	case syntax.OpNoWordBoundary:
		w.b.WriteString(`\B`)
	case syntax.OpCapture:
		w.b.WriteString(`(?:`)
		w.node(re.Sub[0])
		w.b.WriteString(`)`)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		w.atom(re.Sub[0])
		switch re.Op {
		case syntax.OpStar:
			w.b.WriteString(`*`)
		case syntax.OpPlus:
			w.b.WriteString(`+`)
		case syntax.OpQuest:
			w.b.WriteString(`?`)
		default:
			switch {
			case re.Max == re.Min:
				fmt.Fprintf(&w.b, "{%d}", re.Min)
			case re.Max < 0:
				fmt.Fprintf(&w.b, "{%d,}", re.Min)
			default:
				fmt.Fprintf(&w.b, "{%d,%d}", re.Min, re.Max)
			}
		}
		if re.Flags&syntax.NonGreedy != 0 {
			w.b.WriteString(`?`)
		}
	case syntax.OpConcat:
		for i, sub := range re.Sub {
			if i > 0 && (sub.Op == syntax.OpBeginText || sub.Op == syntax.OpEndText) && re.Sub[i-1].Op == sub.Op {
				// ^^ is ^: a registry pattern anchored itself, as
				// "^[a-z]+$" is, need not read so in the schema.
				continue
			}
			if sub.Op == syntax.OpAlternate {
				w.group(sub)
			} else {
				w.node(sub)
			}
		}
	case syntax.OpAlternate:
		for i, sub := range re.Sub {
			if i > 0 {
				w.b.WriteString(`|`)
			}
			w.node(sub)
		}
	default:
		w.ok = false
	}
}

// atom writes re as the operand of a quantifier: as it is when it is one
// character or a class, else in a group (ECMA-262 quantifies no assertion,
// and a quantifier binds to the last character alone).
func (w *ecmaWriter) atom(re *syntax.Regexp) {
	switch {
	case re.Op == syntax.OpLiteral && len(re.Rune) == 1, // a character, a class or a group
		re.Op == syntax.OpCharClass, re.Op == syntax.OpAnyChar, re.Op == syntax.OpAnyCharNotNL, re.Op == syntax.OpCapture:
		w.node(re)
	default:
		w.group(re)
	}
}

func (w *ecmaWriter) group(re *syntax.Regexp) {
	w.b.WriteString(`(?:`)
	w.node(re)
	w.b.WriteString(`)`)
}

// literal writes one character, or with fold the class of every character
// Go's (?i) takes it to match: its orbit under simple case folding.
func (w *ecmaWriter) literal(r rune, fold bool) {
	if fold {
		orbit := []rune{r}
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			orbit = append(orbit, f)
		}
		if len(orbit) > 1 {
			slices.Sort(orbit)
			var ranges []rune
			for _, c := range orbit {
				ranges = append(ranges, c, c)
			}
			w.class(ranges)
			return
		}
	}
	switch {
	case r >= 0x10000:
		// Grouped: without the u flag it is two code units, and a
		// quantifier after it must take both.
		w.b.WriteString(`(?:`)
		w.b.WriteRune(r)
		w.b.WriteString(`)`)
	case r < utf8.RuneSelf && strings.ContainsRune(`\^$.|?*+()[]{}`, r):
		w.b.WriteByte('\\')
		w.b.WriteRune(r)
	default:
		w.char(r)
	}
}

// class writes a character class given as sorted, disjoint ranges (lo, hi
// pairs), as the parser leaves them.
func (w *ecmaWriter) class(ranges []rune) {
	if len(ranges) == 0 {
		w.b.WriteString(`(?!)`)
		return
	}
	last := ranges[len(ranges)-1]
	switch {
	case last < 0x10000:
		w.b.WriteString(`[`)
		w.ranges(ranges)
		w.b.WriteString(`]`)
	case last == unicode.MaxRune && ranges[len(ranges)-2] <= 0x10000:
		// Every character beyond U+FFFF: write the complement, which is
		// within the Basic Multilingual Plane, negated.
		comp := complement(ranges)
		if len(comp) == 0 {
			w.b.WriteString(`[\s\S]`)
			return
		}
		w.b.WriteString(`[^`)
		w.ranges(comp)
		w.b.WriteString(`]`)
	default:
		w.ok = false
	}
}

func (w *ecmaWriter) ranges(ranges []rune) {
	for i := 0; i < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		w.classChar(lo)
		if hi > lo+1 {
			w.b.WriteByte('-')
		}
		if hi > lo {
			w.classChar(hi)
		}
	}
}

// complement returns the ranges of the characters not in ranges.
func complement(ranges []rune) []rune {
	var out []rune
	next := rune(0)
	for i := 0; i < len(ranges); i += 2 {
		if ranges[i] > next {
			out = append(out, next, ranges[i]-1)
		}
		next = ranges[i+1] + 1
	}
	if next <= unicode.MaxRune {
		out = append(out, next, unicode.MaxRune)
	}
	return out
}

func (w *ecmaWriter) classChar(r rune) {
	if r < utf8.RuneSelf && strings.ContainsRune(`\]-[^`, r) {
		w.b.WriteByte('\\')
		w.b.WriteRune(r)
		return
	}
	w.char(r)
}

// char writes a character of the Basic Multilingual Plane that needs no
// escape as syntax: printable ASCII as it is, anything else as an escape
// that every ECMA-262 engine reads alike, with or without the u flag.
func (w *ecmaWriter) char(r rune) {
	switch r {
	case '\t':
		w.b.WriteString(`\t`)
	case '\n':
		w.b.WriteString(`\n`)
	case '\v':
		w.b.WriteString(`\v`)
	case '\f':
		w.b.WriteString(`\f`)
	case '\r':
		w.b.WriteString(`\r`)
	default:
		if r >= 0x20 && r < 0x7f {
			w.b.WriteRune(r)
		} else {
			fmt.Fprintf(&w.b, `\u%04X`, r)
		}
	}
}
