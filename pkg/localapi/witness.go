package localapi

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/tlogwitness"
	"github.com/prod-write/prod-write/receipts"
)

// WitnessStore is where the witnesses' cosignatures are kept: the state
// directory, beside the journal.
func WitnessStore(c *config.Config) tlogwitness.Store {
	return tlogwitness.StoreIn(filepath.Dir(filepath.Dir(c.JournalPath())))
}

// witnessTargets are c's [[witness]]es with their keys from policy; a
// witness whose name no key of the policy has is an answer saying so,
// and is not sent to.
func witnessTargets(c *config.Config, policy *approval.Policy) ([]tlogwitness.Witness, []api.WitnessAnswer) {
	var ts []tlogwitness.Witness
	var missing []api.WitnessAnswer
	for _, w := range c.Witnesses {
		i := slices.IndexFunc(policy.Witnesses, func(pw *approval.Witness) bool { return pw.Name() == w.Name })
		if i < 0 {
			missing = append(missing, api.WitnessAnswer{Name: w.Name, Error: fmt.Sprintf("witness %s: no [[witness]] key of that name in the trust policy: not sent to", w.Name)})
			continue
		}
		ts = append(ts, tlogwitness.Witness{Name: w.Name, URL: w.URL, Verifier: policy.Witnesses[i].Verifier()})
	}
	return ts, missing
}

// witnessMu serialises the writers of the witnesses' store within one
// process (the service's cadence and its receipts-checkpoint calls).
var witnessMu sync.Mutex

// SendToWitnesses sends note, the checkpoint of the tree's whole size, to
// every witness of c (their requests at once, each bounded by the
// client's timeout), keeps what each answers in the store, and returns an
// answer per witness. A witness that fails is an answer with its error,
// never an error: the caller logs it, and it is tried again next time.
func SendToWitnesses(ctx context.Context, c *config.Config, policy *approval.Policy, tree *receipts.Tree, note []byte) ([]api.WitnessAnswer, error) {
	ts, answers := witnessTargets(c, policy)
	if len(ts) == 0 {
		return answers, nil
	}
	witnessMu.Lock()
	defer witnessMu.Unlock()
	store := WitnessStore(c)
	states, err := store.Load()
	if err != nil {
		return nil, fmt.Errorf("the witnesses' state: %w", err)
	}
	client := tlogwitness.NewClient(tlogwitness.DefaultTimeout)
	got := make([]tlogwitness.State, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, w := range ts {
		wg.Go(func() {
			got[i], errs[i] = tlogwitness.Submit(ctx, client, w, states[w.Name], tree, tree.Size(), note)
		})
	}
	wg.Wait()
	for i, w := range ts {
		states[w.Name] = got[i]
		a := api.WitnessAnswer{Name: w.Name, Size: got[i].Size}
		if errs[i] != nil {
			a.Error = errs[i].Error()
		} else {
			a.Cosigned = true
		}
		answers = append(answers, a)
	}
	if err := store.Save(states); err != nil {
		return answers, fmt.Errorf("keeping the witnesses' cosignatures: %w", err)
	}
	return answers, nil
}

// cosignedNote is note with the cosignatures the store keeps on its
// checkpoint appended.
func cosignedNote(c *config.Config, note []byte) ([]byte, error) {
	states, err := WitnessStore(c).Load()
	if err != nil {
		return nil, fmt.Errorf("the witnesses' state: %w", err)
	}
	return tlogwitness.Cosigned(note, states), nil
}
