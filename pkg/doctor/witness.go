package doctor

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/tlogwitness"
)

// witnessFindings reads what the service keeps of the witnesses c
// configures (witnesses.json in the state directory; docs/adr/0044):
//
//   - a witness that holds a larger tree of the log than the journal is
//     the alarm a cut or a rewrite raises: receipts a witness cosigned are
//     gone, and nothing more is sent to it;
//   - a witness whose last submission failed has not cosigned the newest
//     receipts, so a replay that asks for its cosignature fails;
//   - a witness no key of policy names is never sent to and counts for
//     nothing;
//   - a file that does not decode is reported, not crashed on.
//
// None of it is read from the witness itself: doctor sends nothing.
func witnessFindings(c *config.Config, policy *approval.Policy) []Finding {
	if len(c.Witnesses) == 0 {
		return nil
	}
	d := &doctor{c: c}
	keyed := map[string]bool{}
	if policy != nil {
		for _, w := range policy.Witnesses {
			keyed[w.Name()] = true
		}
	}
	store := tlogwitness.StoreIn(c.State)
	states, err := store.Load()
	switch {
	case errors.Is(err, fs.ErrPermission):
		d.add(Info, "witness-state", store.Path, "cannot read what the service keeps of its witnesses: "+err.Error(), "run doctor as root or as the service's account to check the witnesses")
		states = nil
	case err != nil:
		d.add(Warning, "witness-state", store.Path, "what the service keeps of its witnesses does not decode: "+err.Error(),
			"remove the file: the service sends every witness the head again, from the size each answers")
		states = nil
	}
	for _, w := range c.Witnesses {
		if policy != nil && !keyed[w.Name] {
			d.add(Warning, "witness-unkeyed", c.Path, fmt.Sprintf("witness %s has no key in the trust policy: the service never sends it a checkpoint, and no cosignature of it counts", w.Name),
				"add its cosignature/v1 key to trust.toml's [[witness]], or remove it from prod-write.toml")
			continue
		}
		st, ok := states[w.Name]
		switch {
		case states == nil:
		case !ok:
			d.add(Info, "witness-unsent", store.Path, fmt.Sprintf("no checkpoint has been sent to witness %s yet", w.Name), "")
		case st.IsAhead():
			d.add(Critical, "witness-ahead", store.Path, fmt.Sprintf("witness %s holds a tree of %d entries of this log, more than the journal: receipts it cosigned were cut off or rewritten (%s)", w.Name, st.Size, st.Error),
				"stop runs; replay the journal against the last witnessed checkpoint (prod-write replay --checkpoint NOTE --witnesses K), restore the receipts from the archive or a backup, and only then remove the witness's entry from witnesses.json")
		case st.Error != "":
			d.add(Warning, "witness-failing", store.Path, fmt.Sprintf("the last checkpoint sent to witness %s (at %s) failed: %s", w.Name, st.Tried.UTC().Format("2006-01-02T15:04:05Z"), st.Error),
				"check the witness's URL and the service's log; it is sent the head again at the next interval (receipts checkpoint --witness sends at once)")
		}
	}
	return d.out
}
