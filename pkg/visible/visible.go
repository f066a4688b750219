// Package visible holds the one rule for showing text that an agent, a
// caller or a program wrote to the people who judge it: every code point
// that would not show as itself is written as an escape, and every word of
// an argv is quoted on its own (docs/adr/0062-showing-agent-text.md).
//
// Every surface an approver reads goes through it: the Slack message, the
// GitHub issue, the approval page, the CLI's plan and status, MCP results
// and the decision log. A surface never decides for itself what is
// printable.
//
// # The rule
//
// A code point is hidden ([Hidden]) when [unicode.IsPrint] rejects it
// (controls, format characters, unassigned and private-use code points,
// every space but U+0020) or when it is in one of the Unicode property
// tables of what renders as nothing or as blank space: Bidi_Control,
// Join_Control, Other_Default_Ignorable_Code_Point, Variation_Selector,
// the format characters (Cf), the space separators (Zs) and White_Space.
// Those tables come from the standard library's [unicode] package, merged
// with golang.org/x/text/unicode/rangetable. One code point is added by
// hand, U+2800 BRAILLE PATTERN BLANK: it renders blank but is a symbol
// (So) in no such property. A combining mark with nothing to combine with
// (first in the text, or after a space or an escape) is escaped too: it
// would draw itself onto the quote or the space before it.
//
// An escape is written Go-style: \x1b, \n, \u202e, \U000e0100; a byte
// that is not UTF-8 is \xNN.
package visible

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/rangetable"
)

// blank is what renders blank and is in no property table of Unicode: the
// Braille blank is a symbol (So), so neither White_Space nor
// Default_Ignorable_Code_Point holds it. The Hangul fillers (U+115F,
// U+1160, U+3164, U+FFA0) are in Other_Default_Ignorable_Code_Point.
var blank = rangetable.New(0x2800)

// hidden is every code point [unicode.IsPrint] accepts that still does not
// show as itself, and more: the tables overlap, which costs nothing.
var hidden = rangetable.Merge(
	unicode.Other_Default_Ignorable_Code_Point,
	unicode.Variation_Selector,
	unicode.Bidi_Control,
	unicode.Join_Control,
	unicode.Cf,
	unicode.Zs,
	unicode.White_Space,
	blank,
)

// Hidden reports whether r would not show as itself: it is escaped
// wherever untrusted text is shown. U+0020 is the one space that is not
// hidden; a newline is, and [Text] keeps it as a line break.
func Hidden(r rune) bool {
	if r == ' ' {
		return false
	}
	return !unicode.IsPrint(r) || unicode.Is(hidden, r)
}

// shower writes runes by the rule, remembering whether a combining mark
// that comes next has something to combine with.
type shower struct {
	b    strings.Builder
	base bool
}

func (w *shower) escape(r rune) {
	q := strconv.QuoteRuneToASCII(r)
	w.b.WriteString(q[1 : len(q)-1])
	w.base = false
}

// rune writes r as itself or as an escape.
func (w *shower) rune(r rune) {
	if Hidden(r) || (!w.base && unicode.Is(unicode.M, r)) {
		w.escape(r)
		return
	}
	w.b.WriteRune(r)
	w.base = r != ' '
}

// each calls f with every rune of s, writing a byte that is not UTF-8 as
// \xNN.
func (w *shower) each(s string, f func(r rune)) {
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			w.b.WriteString(`\x` + strconv.FormatUint(uint64(s[0])|0x100, 16)[1:])
			w.base = false
		} else {
			f(r)
		}
		s = s[n:]
	}
}

// Text is s with every hidden code point escaped, keeping line breaks:
// for prose (a summary, a reason) and diff lines, shown as plain text.
func Text(s string) string {
	var w shower
	w.each(s, func(r rune) {
		if r == '\n' {
			w.b.WriteByte('\n')
			w.base = false
			return
		}
		w.rune(r)
	})
	return w.b.String()
}

// Line is s with every hidden code point escaped, a newline too: for a
// field shown on one line (a reason, a name), where a line break would
// let the text pass for a line of the surface's own.
func Line(s string) string {
	var w shower
	w.each(s, w.rune)
	return w.b.String()
}

// safe is what a word may hold and still be shown bare.
const safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@{}%"

// Word shows one word (an argv element, a path, a value) so that where it
// starts and ends is plain: bare when it holds only ASCII letters, digits
// and -_./:=,+@{}%, else in double quotes, with " and \ escaped and every
// hidden code point (a newline too) escaped.
func Word(s string) string {
	if s != "" && strings.Trim(s, safe) == "" {
		return s
	}
	return Quote(s)
}

// Quote is s in double quotes, with " and \ escaped and every hidden code
// point (a newline too) escaped: [Word], never bare.
func Quote(s string) string {
	var w shower
	w.b.WriteByte('"')
	w.each(s, func(r rune) {
		switch r {
		case '"', '\\':
			w.b.WriteByte('\\')
			w.b.WriteRune(r)
			w.base = false
		default:
			w.rune(r)
		}
	})
	w.b.WriteByte('"')
	return w.b.String()
}

// Argv shows argv with every element a [Word] of its own, space-separated:
// ["release", "v1 --force"] and ["release v1", "--force"] read
// differently.
func Argv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = Word(a)
	}
	return strings.Join(out, " ")
}

// JSON is the JSON text b with every hidden code point outside ASCII (and
// every combining mark with nothing to combine with) written as a \uXXXX
// escape, so that a person or a model reading the text sees it, while the
// value it decodes to is the same. b must be valid JSON, as encoding/json
// writes it: ASCII controls are escaped already, and every other code
// point is inside a string.
func JSON(b []byte) []byte {
	s := string(b)
	var w shower
	w.each(s, func(r rune) {
		if r >= utf8.RuneSelf && (Hidden(r) || (!w.base && unicode.Is(unicode.M, r))) {
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				w.b.WriteString(`\u` + strconv.FormatUint(uint64(r1), 16) + `\u` + strconv.FormatUint(uint64(r2), 16))
			} else {
				w.b.WriteString(`\u` + strconv.FormatUint(uint64(r)|0x10000, 16)[1:])
			}
			w.base = false
			return
		}
		w.b.WriteRune(r)
		// A mark right after JSON's own punctuation (the quote that opens
		// a string) has nothing of the text's to combine with.
		w.base = r >= utf8.RuneSelf || unicode.IsLetter(r) || unicode.IsDigit(r)
	})
	return []byte(w.b.String())
}
