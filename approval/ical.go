package approval

import (
	"bytes"
	"fmt"
	"strings"
	"time"
)

// CalendarEvent is one VEVENT of a freeze calendar: what prod-write reads
// of it.
type CalendarEvent struct {
	Summary    string
	Start, End time.Time
}

// MaxCalendarEvents bounds the events of one calendar.
const MaxCalendarEvents = 10000

// ParseICalendar reads the VEVENTs of an iCalendar (RFC 5545) file: their
// DTSTART, DTEND and SUMMARY, nothing else. It refuses rather than guess:
// a time without a zone (floating) or with a TZID that is no IANA name,
// an event without DTEND (DURATION is not read), and a recurring event
// (RRULE, RDATE: not expanded, so it would freeze less than it says) are
// errors. Lines may be folded (RFC 5545 §3.1) and end in CRLF or LF.
func ParseICalendar(data []byte) ([]CalendarEvent, error) {
	if len(data) > MaxCalendar {
		return nil, fmt.Errorf("calendar: larger than %d bytes", MaxCalendar)
	}
	lines := unfold(data)
	var events []CalendarEvent
	var cur *CalendarEvent
	depth := 0 // nesting inside the current VEVENT (VALARM…)
	seen := map[string]bool{}
	inCalendar := false
	for n, raw := range lines {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("calendar line %d: %s", n+1, fmt.Sprintf(format, args...))
		}
		if raw == "" {
			continue
		}
		name, params, value, err := contentLine(raw)
		if err != nil {
			return nil, bad("%v", err)
		}
		switch {
		case name == "BEGIN" && strings.EqualFold(value, "VCALENDAR") && !inCalendar && cur == nil:
			inCalendar = true
			continue
		case name == "END" && strings.EqualFold(value, "VCALENDAR") && inCalendar && cur == nil:
			inCalendar = false
			continue
		case !inCalendar:
			return nil, bad("%s outside BEGIN:VCALENDAR", name)
		}
		if cur == nil {
			if name == "BEGIN" && strings.EqualFold(value, "VEVENT") {
				if len(events) == MaxCalendarEvents {
					return nil, bad("more than %d events", MaxCalendarEvents)
				}
				cur, depth, seen = &CalendarEvent{}, 0, map[string]bool{}
			}
			continue // VTIMEZONE and other components: not read
		}
		if name == "BEGIN" {
			depth++
			continue
		}
		if name == "END" {
			if depth > 0 {
				depth--
				continue
			}
			if !strings.EqualFold(value, "VEVENT") {
				return nil, bad("END:%s inside a VEVENT", value)
			}
			switch {
			case !seen["DTSTART"]:
				return nil, bad("event %q has no DTSTART", cur.Summary)
			case !seen["DTEND"]:
				return nil, bad("event %q has no DTEND (DURATION is not read)", cur.Summary)
			case cur.Summary == "":
				return nil, bad("event has no SUMMARY: a freeze is named by it")
			case !cur.End.After(cur.Start):
				return nil, bad("event %q ends at or before it starts", cur.Summary)
			}
			events = append(events, *cur)
			cur = nil
			continue
		}
		if depth > 0 {
			continue
		}
		switch name {
		case "DTSTART", "DTEND", "SUMMARY":
			if seen[name] {
				return nil, bad("%s twice in one event", name)
			}
			seen[name] = true
		case "RRULE", "RDATE", "EXRULE", "DURATION":
			return nil, bad("%s is not supported: list each freeze as its own event with DTSTART and DTEND", name)
		}
		switch name {
		case "DTSTART", "DTEND":
			t, err := calendarTime(params, value)
			if err != nil {
				return nil, bad("%s: %v", name, err)
			}
			if name == "DTSTART" {
				cur.Start = t
			} else {
				cur.End = t
			}
		case "SUMMARY":
			cur.Summary = unescapeText(value)
		}
	}
	if cur != nil || inCalendar {
		return nil, fmt.Errorf("calendar: ends inside a component")
	}
	return events, nil
}

// unfold joins folded lines: a line beginning with a space or tab
// continues the previous one.
func unfold(data []byte) []string {
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') && len(out) > 0 {
			out[len(out)-1] += l[1:]
			continue
		}
		out = append(out, l)
	}
	return out
}

// contentLine splits NAME;PARAM=V;…:VALUE. Parameter values may be
// quoted (and then hold ; and :).
func contentLine(l string) (name string, params map[string]string, value string, err error) {
	i := strings.IndexAny(l, ";:")
	if i <= 0 {
		return "", nil, "", fmt.Errorf("not a content line")
	}
	name = strings.ToUpper(l[:i])
	params = map[string]string{}
	rest := l[i:]
	for len(rest) > 0 && rest[0] == ';' {
		rest = rest[1:]
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return "", nil, "", fmt.Errorf("parameter without a value")
		}
		pname := strings.ToUpper(rest[:eq])
		rest = rest[eq+1:]
		var pval string
		if strings.HasPrefix(rest, `"`) {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return "", nil, "", fmt.Errorf("unterminated quoted parameter")
			}
			pval, rest = rest[1:1+end], rest[2+end:]
		} else {
			end := strings.IndexAny(rest, ";:")
			if end < 0 {
				return "", nil, "", fmt.Errorf("line without a value")
			}
			pval, rest = rest[:end], rest[end:]
		}
		params[pname] = pval
	}
	if len(rest) == 0 || rest[0] != ':' {
		return "", nil, "", fmt.Errorf("line without a value")
	}
	return name, params, rest[1:], nil
}

// calendarTime reads a DATE-TIME in UTC (…Z) or with a TZID, or a DATE
// with a TZID. A floating time (no Z, no TZID) is an error.
func calendarTime(params map[string]string, v string) (time.Time, error) {
	tzid := params["TZID"]
	if strings.HasSuffix(v, "Z") {
		if tzid != "" {
			return time.Time{}, fmt.Errorf("%q is UTC and has TZID %q", v, tzid)
		}
		return time.Parse("20060102T150405Z", v)
	}
	if tzid == "" {
		return time.Time{}, fmt.Errorf("%q has no time zone (floating): give TZID or a UTC time", v)
	}
	loc, err := time.LoadLocation(tzid)
	if err != nil || tzid == "Local" {
		return time.Time{}, fmt.Errorf("TZID %q is not an IANA time zone name", tzid)
	}
	layout := "20060102T150405"
	if strings.EqualFold(params["VALUE"], "DATE") || len(v) == 8 {
		layout = "20060102"
	}
	return time.ParseInLocation(layout, v, loc)
}

// unescapeText undoes RFC 5545 TEXT escapes.
func unescapeText(s string) string {
	r := strings.NewReplacer(`\\`, `\`, `\;`, `;`, `\,`, `,`, `\n`, " ", `\N`, " ")
	return r.Replace(s)
}
