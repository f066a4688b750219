package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/pkg/store/storetest"
)

// inotifyInstances counts this process's inotify instances.
func inotifyInstances(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// Many waiters share one inotify instance: an account has few
// (fs.inotify.max_user_instances, 128 by default), and the runner service
// holds a wait per agent. Each waiter is woken by its own plan's evidence,
// and only by it, whether the plan's directory existed when it began to
// watch or is made after.
func TestManyWaitersOneInstance(t *testing.T) {
	d, err := store.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	before := inotifyInstances(t)
	const n = 300
	fps := make([]string, n)
	ws := make([]*store.Watcher, n)
	for i := range n {
		fps[i] = storetest.Fingerprint(fmt.Sprint("plan", i))
		if i%2 == 0 {
			// Half have evidence already.
			if err := d.PutEvidence(fps[i], storetest.ID(fmt.Sprint("first", i)), storetest.Envelope(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		if ws[i], err = d.Watch(fps[i]); err != nil {
			t.Fatalf("watcher %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, w := range ws {
			w.Close()
		}
	})
	if got := inotifyInstances(t) - before; got > 1 {
		t.Fatalf("%d waiters hold %d inotify instances, want one", n, got)
	}
	for _, i := range []int{250, 251} {
		if err := d.PutEvidence(fps[i], storetest.ID(fmt.Sprint("decision", i)), storetest.Envelope(`{}`)); err != nil {
			t.Fatal(err)
		}
		// Woken by the change, not by the far deadline; the test's own
		// timeout is the bound.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := ws[i].Wait(ctx, time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("waiter %d was not woken by its plan's evidence: %v", i, err)
		}
		cancel()
	}
	// Another plan's waiter was not woken: its wait runs to its deadline.
	start := time.Now()
	if err := ws[7].Wait(context.Background(), start.Add(50*time.Millisecond)); err != nil || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("waiter 7 woken by other plans' evidence (%v after %s)", err, time.Since(start))
	}
}
