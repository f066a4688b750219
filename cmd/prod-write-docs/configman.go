package main

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// configMan renders docs/CONFIG.md as the section-5 man page
// prod-write.toml(5). CONFIG.md is the one source (a test holds it to the
// loaders' keys), so the page is generated from it and cannot drift; this
// handles the Markdown CONFIG.md uses: headings, paragraphs, lists, tables
// and code blocks, with `code`, *emphasis* and [links](…).
func configMan(md []byte, version string) []byte {
	var b bytes.Buffer
	// man-db runs preconv on a page that says its coding (… and — are in
	// CONFIG.md).
	b.WriteString(".\\\" -*- coding: UTF-8 -*-\n")
	fmt.Fprintf(&b, ".TH PROD-WRITE.TOML 5 \"\" %q \"prod-write configuration\"\n", "prod-write "+version)
	b.WriteString(".SH NAME\nprod-write.toml, operations/*.toml, trust.toml \\- prod-write's configuration files\n")
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var header []string
	var para []string // a paragraph's lines, joined so `code` may wrap
	flush := func() {
		if len(para) > 0 {
			b.WriteString(escapeLine(inline(strings.Join(para, " "))) + "\n")
			para = nil
		}
	}
	inCode, first := false, true
	for sc.Scan() {
		line := sc.Text()
		plain := !inCode && line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "|") && !strings.HasPrefix(line, "```") && !strings.HasPrefix(line, "- ")
		if plain {
			para = append(para, strings.TrimSpace(line))
			continue
		}
		flush()
		switch {
		case strings.HasPrefix(line, "```"):
			inCode = !inCode
			if inCode {
				b.WriteString(".PP\n.RS 4\n.nf\n")
			} else {
				b.WriteString(".fi\n.RE\n")
			}
		case inCode:
			b.WriteString(escapeLine(roffEscape(line)) + "\n")
		case strings.HasPrefix(line, "# "):
			if first {
				b.WriteString(".SH DESCRIPTION\n")
				first = false
			}
		case strings.HasPrefix(line, "## "):
			fmt.Fprintf(&b, ".SH %s\n", strings.ToUpper(inline(line[3:])))
		case strings.HasPrefix(line, "### "):
			fmt.Fprintf(&b, ".SS %s\n", inline(line[4:]))
		case strings.HasPrefix(line, "|"):
			cells := tableCells(line)
			switch {
			case header == nil:
				header = cells
			case strings.Trim(strings.Join(cells, ""), "-: ") == "":
				// the separator row
			default:
				// Each row is a tagged paragraph: the first cell, then
				// the others under their column names.
				fmt.Fprintf(&b, ".TP\n%s\n", escapeLine(inline(cells[0])))
				for i := 1; i < len(cells) && i < len(header); i++ {
					if i > 1 {
						b.WriteString(".br\n")
					}
					fmt.Fprintf(&b, "%s\n", escapeLine(inline(header[i])+": "+inline(cells[i])))
				}
			}
		case strings.TrimSpace(line) == "":
			header = nil
			b.WriteString(".PP\n")
		case strings.HasPrefix(line, "- "):
			fmt.Fprintf(&b, ".IP \\(bu 2\n%s\n", escapeLine(inline(line[2:])))
		}
	}
	flush()
	b.WriteString(".SH SEE ALSO\nprod-write(1)\n")
	return b.Bytes()
}

func tableCells(line string) []string {
	// A | inside `code` is not a column separator.
	var cells []string
	var cur strings.Builder
	code := false
	for _, r := range strings.Trim(strings.TrimSpace(line), "|") {
		switch {
		case r == '`':
			code = !code
		case r == '|' && !code:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

var (
	reLink = regexp.MustCompile(`\[([^\]]+)\]\([^)]*\)`)
	reCode = regexp.MustCompile("`([^`]*)`")
	reEm   = regexp.MustCompile(`\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*`)
)

// inline escapes text for roff and turns `code` bold, *emphasis* italic and
// [text](link) into its text.
func inline(s string) string {
	s = reLink.ReplaceAllString(s, "$1")
	s = roffEscape(s)
	s = reCode.ReplaceAllString(s, `\fB$1\fR`)
	return reEm.ReplaceAllStringFunc(s, func(m string) string {
		return `\fI` + strings.Trim(m, "*") + `\fR`
	})
}

func roffEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	return strings.ReplaceAll(s, "-", `\-`)
}

// escapeLine keeps a line that starts with . or ' from being read as a
// request.
func escapeLine(s string) string {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
}
