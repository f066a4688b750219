package receipts

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Spend is one run's reliance on an approval record, as one host's replay
// saw it.
type Spend struct {
	Host  string    `json:"host"`
	Line  int       `json:"line"`
	Seq   uint64    `json:"seq"`
	RunID string    `json:"run_id"`
	Time  time.Time `json:"time,omitzero"`
}

// Reuse is an approval record spent more often than it allows across the
// hosts of a fleet: what a point-in-time restore of the store, which
// un-spends approvals, lets happen without any one host's journal showing
// it.
type Reuse struct {
	Record  string  `json:"record"`
	Allowed int     `json:"allowed"`
	Spends  []Spend `json:"spends"`
}

// Detail says what r is, naming every host and receipt.
func (r Reuse) Detail() string {
	where := make([]string, len(r.Spends))
	for i, s := range r.Spends {
		where[i] = fmt.Sprintf("%s seq %d (run %s)", s.Host, s.Seq, s.RunID)
	}
	return fmt.Sprintf("record %.12s… allows %d use(s) but %d runs relied on it across hosts: %s", r.Record, r.Allowed, len(r.Spends), strings.Join(where, ", "))
}

// Fleet counts the uses of every approval record across the journals of
// several hosts (docs/DISTRIBUTED.md, "Replaying the fleet"). Each host's
// own replay counts the uses within its journal; Fleet sees the ones no
// single journal holds. Its memory is one entry per record relied on, and
// in it one Spend per run that relied on the record: it grows with the
// fleet's runs, unlike one journal's replay (ADR 0053).
type Fleet struct {
	mu   sync.Mutex
	uses map[string]*Reuse
}

// Host returns the hook to set as [Replayer.Relied] while replaying host's
// journal.
func (f *Fleet) Host(host string) func(Result, []string, int) {
	return func(r Result, records []string, anchorUses int) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.uses == nil {
			f.uses = map[string]*Reuse{}
		}
		for i, id := range records {
			u := f.uses[id]
			if u == nil {
				u = &Reuse{Record: id}
				f.uses[id] = u
			}
			u.Allowed = max(u.Allowed, allowedUses(i, anchorUses))
			u.Spends = append(u.Spends, Spend{Host: host, Line: r.Line, Seq: r.Seq, RunID: r.RunID, Time: r.Time})
		}
	}
}

// Reused returns the records relied on more often than they allow by runs
// on more than one host, in record order. A record overspent within one
// host alone is that host's replay's evidence_reused already.
func (f *Fleet) Reused() []Reuse {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Reuse
	for _, u := range f.uses {
		if len(u.Spends) <= u.Allowed {
			continue
		}
		hosts := map[string]bool{}
		for _, s := range u.Spends {
			hosts[s.Host] = true
		}
		if len(hosts) > 1 {
			out = append(out, *u)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Record < out[j].Record })
	return out
}
