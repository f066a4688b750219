package approval_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// freezeCast adds a principal with the freeze role (and one who plans and
// holds it, for separation of duties) to the demo cast.
var freezeCast = append(append([]member{}, demoCast...),
	member{ID: "cab", Roles: []string{"freeze"}},
	member{ID: "fred", Roles: []string{"agent", "freeze"}},
)

func freezePolicy(t tb, freezes string) *approval.Policy {
	t.Helper()
	p, err := approval.ParsePolicy("trust.toml", []byte(policyTOML(freezeCast)+freezes))
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	return p
}

// around is a freeze covering testNow, in an explicit zone.
const around = `
[[freeze]]
name = "year-end"
start = "2030-01-01T00:00"
end = "2030-01-03"
time_zone = "Europe/Paris"
reason = "books closing"
`

func grant(fp, freeze, by string) approval.FreezeGrant {
	return approval.FreezeGrant{Fingerprint: fp, Freeze: freeze, Granter: by, Reason: "INC-1",
		Issued: testNow.Add(-time.Minute), Expires: testNow.Add(time.Hour)}
}

func TestFreezeGate(t *testing.T) {
	op := mustOp(t, 1, []string{gera, smith}, true)
	nonMutating := mustOp(t, 1, []string{gera, smith}, false)
	cases := []struct {
		name     string
		freezes  string
		op       string // "", "read"
		planner  string
		evidence func(fp string) []*approval.Envelope
		want     refusal.Code // "" allowed
		reason   string
	}{
		{name: "a go during a freeze is refused", freezes: around,
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1))}
			}, want: refusal.Frozen, reason: `freeze "year-end" holds operations it covers until 2030-01-02T23:00:00Z (books closing)`},
		{name: "record and approvals during a freeze are refused", freezes: around,
			evidence: func(fp string) []*approval.Envelope {
				rec := mustSign(t, "smith", approval.TypeSmith, smithRecord(fp, "smith"))
				return []*approval.Envelope{rec, mustSign(t, "alice", approval.TypeTrinity, answer(fp, mustID(t, rec), approval.Approve, "alice"))}
			}, want: refusal.Frozen},
		{name: "a grant by the freeze role lets the go through", freezes: around,
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1)),
					mustSign(t, "cab", approval.TypeFreezeGrant, grant(fp, "year-end", "cab"))}
			}},
		{name: "a grant is no approval", freezes: around,
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "cab", approval.TypeFreezeGrant, grant(fp, "year-end", "cab"))}
			}, want: refusal.NoApproval},
		{name: "a grant by someone without the freeze role does not count", freezes: around,
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1)),
					mustSign(t, "gera", approval.TypeFreezeGrant, grant(fp, "year-end", "gera"))}
			}, want: refusal.Frozen},
		{name: "the planner cannot grant its own plan", freezes: around, planner: "fred",
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1)),
					mustSign(t, "fred", approval.TypeFreezeGrant, grant(fp, "year-end", "fred"))}
			}, want: refusal.Frozen},
		{name: "a grant through another freeze does not count", freezes: around,
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1)),
					mustSign(t, "cab", approval.TypeFreezeGrant, grant(fp, "other", "cab"))}
			}, want: refusal.Frozen},
		{name: "a grant of another plan does not count", freezes: around,
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1)),
					mustSign(t, "cab", approval.TypeFreezeGrant, grant("sha256:"+strings.Repeat("0", 64), "year-end", "cab"))}
			}, want: refusal.Frozen},
		{name: "an expired grant does not count", freezes: around,
			evidence: func(fp string) []*approval.Envelope {
				g := grant(fp, "year-end", "cab")
				g.Expires = testNow
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1)),
					mustSign(t, "cab", approval.TypeFreezeGrant, g)}
			}, want: refusal.Frozen},
		{name: "two freezes need two grants", freezes: around + strings.ReplaceAll(around, "year-end", "audit"),
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1)),
					mustSign(t, "cab", approval.TypeFreezeGrant, grant(fp, "year-end", "cab"))}
			}, want: refusal.Frozen, reason: `freeze "audit"`},
		{name: "a freeze that ended does not hold", freezes: `
[[freeze]]
name = "past"
start = "2029-12-01T00:00:00Z"
end = "2030-01-02T03:04:05Z"
`,
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1))}
			}},
		{name: "a freeze of other operations does not hold", freezes: around + `operations = ["deploy"]` + "\n",
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1))}
			}},
		{name: "a freeze of this operation holds", freezes: around + `operations = ["touch"]` + "\n",
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1))}
			}, want: refusal.Frozen},
		{name: "a freeze of other targets does not hold", freezes: around + `targets = ["production"]` + "\n",
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1))}
			}},
		{name: "a non-mutating operation is not frozen", freezes: around, op: "read",
			evidence: func(fp string) []*approval.Envelope { return nil }},
		{name: "a veto still wins during a freeze", freezes: around,
			evidence: func(fp string) []*approval.Envelope {
				return []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraNoGo(fp, "gera")),
					mustSign(t, "cab", approval.TypeFreezeGrant, grant(fp, "year-end", "cab"))}
			}, want: refusal.Vetoed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := freezePolicy(t, c.freezes)
			o := op
			if c.op == "read" {
				o = nonMutating
			}
			planner := c.planner
			if planner == "" {
				planner = "agent"
			}
			plan, penv := planFor(t, o, planner, "")
			d, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: c.evidence(plan.Fingerprint), Policy: p, Op: o, Now: testNow})
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			r, ok := refusal.As(err)
			if !ok || r.Code != c.want {
				t.Fatalf("got %v (decision %+v), want %s", err, d, c.want)
			}
			if c.reason != "" && !strings.Contains(r.Reason, c.reason) {
				t.Errorf("reason %q does not say %q", r.Reason, c.reason)
			}
		})
	}
}

func TestFreezeGrantIsKept(t *testing.T) {
	op := mustOp(t, 1, []string{gera}, true)
	p := freezePolicy(t, around)
	plan, penv := planFor(t, op, "agent", "")
	g := mustSign(t, "cab", approval.TypeFreezeGrant, grant(plan.Fingerprint, "year-end", "cab"))
	d, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", 1)), g}, Policy: p, Op: op, Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Granted) != 1 || d.Granted[0].ID != mustID(t, g) {
		t.Fatalf("granted %v, want the grant", d.Granted)
	}
	for _, s := range d.Relied {
		if s.ID == mustID(t, g) {
			t.Fatal("a grant is among the relied-on (consumed) records")
		}
	}
	// Outside the freeze the grant is not needed, and not kept.
	d, err = approval.Evaluate(approval.Input{Plan: penv, Evidence: []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", 1)), g}, Policy: p, Op: op, Now: testNow.Add(48 * time.Hour)})
	if err == nil && len(d.Granted) != 0 {
		t.Fatalf("granted %v outside the freeze", d.Granted)
	}
}

func TestFreezePolicyErrors(t *testing.T) {
	for _, c := range []struct{ name, toml, want string }{
		{"no zone", "[[freeze]]\nname = \"x\"\nstart = \"2030-01-01T00:00\"\nend = \"2030-01-02T00:00\"\n", "has no time zone"},
		{"offset and zone", "[[freeze]]\nname = \"x\"\nstart = \"2030-01-01T00:00:00Z\"\nend = \"2030-01-02T00:00:00Z\"\ntime_zone = \"UTC\"\n", "give one of them"},
		{"bad zone", "[[freeze]]\nname = \"x\"\nstart = \"2030-01-01\"\nend = \"2030-01-02\"\ntime_zone = \"Mars/Olympus\"\n", "not an IANA"},
		{"Local", "[[freeze]]\nname = \"x\"\nstart = \"2030-01-01\"\nend = \"2030-01-02\"\ntime_zone = \"Local\"\n", "not an IANA"},
		{"end before start", "[[freeze]]\nname = \"x\"\nstart = \"2030-01-02T00:00:00Z\"\nend = \"2030-01-01T00:00:00Z\"\n", "not after start"},
		{"no name", "[[freeze]]\nstart = \"2030-01-01T00:00:00Z\"\nend = \"2030-01-02T00:00:00Z\"\n", "name is required"},
		{"unknown key", "[[freeze]]\nname = \"x\"\nstart = \"2030-01-01T00:00:00Z\"\nend = \"2030-01-02T00:00:00Z\"\nuntil = 3\n", "until"},
		{"calendar without digest", "[[freeze_calendar]]\nfile = \"f.ics\"\n", "sha256 are required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := approval.ParsePolicy("trust.toml", []byte(policyTOML(freezeCast)+c.toml))
			var ce *approval.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a config error saying %q", err, c.want)
			}
		})
	}
}

const sampleICS = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n" +
	"BEGIN:VTIMEZONE\r\nTZID:Europe/Paris\r\nBEGIN:STANDARD\r\nDTSTART:19701025T030000\r\nEND:STANDARD\r\nEND:VTIMEZONE\r\n" +
	"BEGIN:VEVENT\r\nUID:1\r\nDTSTART;TZID=Europe/Paris:20300101T000000\r\nDTEND;TZID=\"Europe/Paris\":20300103T000000\r\nSUMMARY:Year\r\n  end\\, books\r\n" +
	"BEGIN:VALARM\r\nTRIGGER:-PT15M\r\nEND:VALARM\r\nEND:VEVENT\r\n" +
	"BEGIN:VEVENT\nDTSTART;VALUE=DATE;TZID=America/New_York:20301124\nDTEND:20301126T050000Z\nSUMMARY:Thanksgiving\nEND:VEVENT\n" +
	"END:VCALENDAR\r\n"

func TestParseICalendar(t *testing.T) {
	events, err := approval.ParseICalendar([]byte(sampleICS))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 {
		t.Fatalf("%d events, want 2", len(events))
	}
	if events[0].Summary != "Year end, books" || !events[0].Start.Equal(time.Date(2029, 12, 31, 23, 0, 0, 0, time.UTC)) || !events[0].End.Equal(time.Date(2030, 1, 2, 23, 0, 0, 0, time.UTC)) {
		t.Errorf("event 0: %+v", events[0])
	}
	if !events[1].Start.Equal(time.Date(2030, 11, 24, 5, 0, 0, 0, time.UTC)) {
		t.Errorf("event 1: %+v", events[1])
	}
	wrap := func(ev string) string {
		return "BEGIN:VCALENDAR\nBEGIN:VEVENT\n" + ev + "END:VEVENT\nEND:VCALENDAR\n"
	}
	for _, c := range []struct{ name, ics, want string }{
		{"floating", wrap("DTSTART:20300101T000000\nDTEND:20300102T000000Z\nSUMMARY:x\n"), "floating"},
		{"no dtend", wrap("DTSTART:20300101T000000Z\nDURATION:P1D\nSUMMARY:x\n"), "DURATION"},
		{"missing dtend", wrap("DTSTART:20300101T000000Z\nSUMMARY:x\n"), "no DTEND"},
		{"rrule", wrap("DTSTART:20300101T000000Z\nDTEND:20300102T000000Z\nRRULE:FREQ=YEARLY\nSUMMARY:x\n"), "RRULE"},
		{"no summary", wrap("DTSTART:20300101T000000Z\nDTEND:20300102T000000Z\n"), "SUMMARY"},
		{"windows zone", wrap("DTSTART;TZID=Pacific Standard Time:20300101T000000\nDTEND:20300102T000000Z\nSUMMARY:x\n"), "IANA"},
		{"backwards", wrap("DTSTART:20300102T000000Z\nDTEND:20300101T000000Z\nSUMMARY:x\n"), "ends at or before"},
		{"twice", wrap("DTSTART:20300101T000000Z\nDTSTART:20300101T000000Z\nDTEND:20300102T000000Z\nSUMMARY:x\n"), "twice"},
		{"unterminated", "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20300101T000000Z\n", "ends inside"},
		{"outside", "DTSTART:20300101T000000Z\n", "outside"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := approval.ParseICalendar([]byte(c.ics))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// A calendar is bound to the policy by digest: the same bytes freeze, a
// changed file is refused.
func TestFreezeCalendar(t *testing.T) {
	dir := t.TempDir()
	ics := filepath.Join(dir, "freezes.ics")
	if err := os.WriteFile(ics, []byte(sampleICS), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(sampleICS))
	toml := policyTOML(freezeCast) + "\n[[freeze_calendar]]\nfile = \"freezes.ics\"\nsha256 = \"sha256:" + hex.EncodeToString(sum[:]) + "\"\ntargets = [\"staging\"]\n"
	p, err := approval.ParsePolicy(filepath.Join(dir, "trust.toml"), []byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Frozen("touch", "staging", testNow); len(got) != 1 || got[0].Name != "Year end, books" {
		t.Fatalf("frozen: %v", got)
	}
	if got := p.Frozen("touch", "production", testNow); len(got) != 0 {
		t.Fatalf("production frozen: %v", got)
	}
	if err := os.WriteFile(ics, []byte(strings.Replace(sampleICS, "20300103", "20300104", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := approval.ParsePolicy(filepath.Join(dir, "trust.toml"), []byte(toml)); err == nil || !strings.Contains(err.Error(), "hashes to") {
		t.Fatalf("a changed calendar: %v", err)
	}
}

// A freeze calendar is whatever file the policy names, and whoever can
// write there can make it huge or put a FIFO or a device in its place:
// it is read only as a regular file, and never more than MaxCalendar+1
// bytes of it, with an error naming the file.
func TestFreezeCalendarFileBounded(t *testing.T) {
	dir := t.TempDir()
	sum := sha256.Sum256([]byte(sampleICS))
	policy := func(file string) []byte {
		return []byte(policyTOML(freezeCast) + "\n[[freeze_calendar]]\nfile = \"" + file + "\"\nsha256 = \"sha256:" + hex.EncodeToString(sum[:]) + "\"\n")
	}
	parse := func(t *testing.T, file, want string) {
		t.Helper()
		_, err := approval.ParsePolicy(filepath.Join(dir, "trust.toml"), policy(file))
		var ce *approval.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want a config error saying %q", err, want)
		}
	}

	t.Run("oversized", func(t *testing.T) {
		// Sparse: 64 MiB that take no disk, and that reading whole
		// would allocate.
		big := filepath.Join(dir, "big.ics")
		f, err := os.Create(big)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(64 << 20); err != nil {
			t.Fatal(err)
		}
		f.Close()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		parse(t, "big.ics", fmt.Sprintf("freeze calendar %s is larger than %d bytes", big, approval.MaxCalendar))
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
			t.Fatalf("refusing a 64 MiB calendar allocated %d bytes: it was read whole", got)
		}
	})

	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(dir, "fifo.ics")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		// A writer that hands the calendar the policy binds to whoever
		// opens the FIFO: read, it would load.
		done := make(chan struct{})
		go func() {
			defer close(done)
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			w.Write([]byte(sampleICS))
			w.Close()
		}()
		t.Cleanup(func() {
			// A reader of our own lets the writer finish if nothing
			// opened the FIFO.
			if r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
				<-done
				r.Close()
			}
		})
		parse(t, "fifo.ics", "freeze calendar "+fifo+" is not a regular file")
	})

	t.Run("device", func(t *testing.T) {
		parse(t, "/dev/null", "freeze calendar /dev/null is not a regular file")
	})

	t.Run("directory", func(t *testing.T) {
		parse(t, ".", "freeze calendar "+dir+" is not a regular file")
	})
}

func FuzzParseICalendar(f *testing.F) {
	f.Add([]byte(sampleICS))
	f.Add([]byte("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;TZID=\"a;b:c\":20300101\nEND:VEVENT\nEND:VCALENDAR\n"))
	f.Add([]byte("BEGIN:VCALENDAR\n \tBEGIN:VEVENT\nX;Y=\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		events, err := approval.ParseICalendar(data)
		if err != nil {
			return
		}
		for _, e := range events {
			if !e.End.After(e.Start) || e.Summary == "" {
				t.Fatalf("accepted an event that is no window: %+v", e)
			}
		}
	})
}
