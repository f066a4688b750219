package receipts_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/receipts"
)

// historyICS is a calendar a past policy binds.
const historyICS = "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20300101T000000Z\nDTEND:20300102T000000Z\nSUMMARY:x\nEND:VEVENT\nEND:VCALENDAR\n"

// A past policy's freeze calendar is read from the history by digest as
// ReadCalendarFile reads one (approval/freeze.go): a file someone made
// huge is refused after MaxCalendar+1 bytes, a FIFO without being opened,
// each naming the file, and a regular calendar of the right digest loads.
func TestHistoryCalendarFileBounded(t *testing.T) {
	current, err := approval.ParsePolicy("trust.toml", nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(historyICS))
	digest := hex.EncodeToString(sum[:])
	trust := []byte("[[freeze_calendar]]\nfile = \"freezes.ics\"\nsha256 = \"sha256:" + digest + "\"\n")
	tsum := sha256.Sum256(trust)
	// history makes a history directory holding the policy, and lets put
	// place its calendar.
	history := func(t *testing.T, put func(path string)) (string, string) {
		dir := t.TempDir()
		for _, sub := range []string{"trust", "calendars"} {
			if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "trust", "sha256-"+hex.EncodeToString(tsum[:])+".toml"), trust, 0o644); err != nil {
			t.Fatal(err)
		}
		ics := filepath.Join(dir, "calendars", "sha256-"+digest+".ics")
		put(ics)
		return dir, ics
	}

	t.Run("regular", func(t *testing.T) {
		dir, _ := history(t, func(path string) {
			if err := os.WriteFile(path, []byte(historyICS), 0o644); err != nil {
				t.Fatal(err)
			}
		})
		h, err := receipts.LoadHistory(dir, current, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p := h.Policies["sha256:"+hex.EncodeToString(tsum[:])]; p == nil || len(p.Freezes) != 1 {
			t.Fatalf("the past policy's calendar did not load: %+v", h.Policies)
		}
	})

	t.Run("oversized", func(t *testing.T) {
		dir, ics := history(t, func(path string) {
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, 64<<20); err != nil { // sparse
				t.Fatal(err)
			}
		})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := receipts.LoadHistory(dir, current, nil)
		runtime.ReadMemStats(&after)
		if want := fmt.Sprintf("freeze calendar %s is larger than %d bytes", ics, approval.MaxCalendar); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want an error saying %q", err, want)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
			t.Fatalf("refusing a 64 MiB calendar allocated %d bytes: it was read whole", got)
		}
	})

	t.Run("fifo", func(t *testing.T) {
		done := make(chan struct{})
		dir, ics := history(t, func(path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			// Whoever opens the FIFO is handed the calendar the policy
			// binds: read, it would load.
			go func() {
				defer close(done)
				w, err := os.OpenFile(path, os.O_WRONLY, 0)
				if err != nil {
					return
				}
				w.Write([]byte(historyICS))
				w.Close()
			}()
			t.Cleanup(func() {
				// A reader of our own lets the writer finish if nothing
				// opened the FIFO.
				if r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
					<-done
					r.Close()
				}
			})
		})
		_, err := receipts.LoadHistory(dir, current, nil)
		if want := "freeze calendar " + ics + " is not a regular file"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want an error saying %q", err, want)
		}
	})
}
