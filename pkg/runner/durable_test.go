package runner_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// syncJournal makes durable.Sync, the fsync the journal uses when nobody
// injects one, call hook for each fsync of d's journal file until the test
// ends; every other fsync goes to the disk as usual.
func syncJournal(t *testing.T, d *deployment, hook func() error) {
	t.Helper()
	path := filepath.Join(d.dir, "state", "journal", "receipts.jsonl")
	orig := durable.Sync
	t.Cleanup(func() { durable.Sync = orig })
	durable.Sync = func(f *os.File) error {
		if f.Name() == path {
			if err := hook(); err != nil {
				return err
			}
		}
		return orig(f)
	}
}

// A program must never start on an intent receipt a power cut could still
// take: when the intent's fsync fails, the run fails before the program
// starts, saying nothing ran, and the approval it consumed stays spent, so
// no later run starts on it either.
func TestIntentNotSyncedProgramNeverStarts(t *testing.T) {
	d := newDeployment(t)
	fp := d.plan(t, 1)
	disk := errors.New("EIO: the disk is gone")
	syncJournal(t, d, func() error { return disk })
	var stdout, stderr bytes.Buffer
	ran, err := d.runner(&stdout, &stderr).Run(fp)
	if err == nil || !strings.Contains(err.Error(), "nothing ran") || !strings.Contains(err.Error(), "the disk is gone") {
		t.Fatalf("run whose intent cannot be synced: %v (ran %v), want an error saying nothing ran and why", err, ran)
	}
	if _, ok := refusal.As(err); ok {
		t.Errorf("a failed fsync is reported as a refusal: %v", err)
	}
	if stdout.Len() != 0 {
		t.Fatalf("the program ran although its intent receipt never became durable: it printed %q", stdout.String())
	}

	disk = nil
	ran, err = d.runner(&stdout, io.Discard).Run(fp)
	if r, ok := refusal.As(err); !ok || r.Code != refusal.EvidenceConsumed {
		t.Fatalf("a later run of the approval the failed run spent: %v (ran %v), want refused %s", err, ran, refusal.EvidenceConsumed)
	}
	if stdout.Len() != 0 {
		t.Fatalf("the program ran on a spent approval: it printed %q", stdout.String())
	}
}

// The intent's fsync returns before the program starts and the outcome's
// after it ends: at the journal's first fsync the program has printed
// nothing, at its second it has.
func TestIntentSyncedBeforeTheProgramStarts(t *testing.T) {
	d := newDeployment(t)
	fp := d.plan(t, 1)
	var stdout bytes.Buffer
	var printed []string // what the program had printed at each fsync
	syncJournal(t, d, func() error {
		printed = append(printed, stdout.String())
		return nil
	})
	if _, err := d.runner(&stdout, io.Discard).Run(fp); err != nil {
		t.Fatal(err)
	}
	if len(printed) != 2 || printed[0] != "" || printed[1] != "said staging\n" {
		t.Fatalf("the program had printed %q at the journal's fsyncs; want nothing at the intent's and all at the outcome's", printed)
	}
}
