package receipts_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// benchJournal is the journal cmd/prod-write-bench generates (journal.go):
// n receipts, runs of distinct plans each approved by its own Gera go.
func benchJournal(b *testing.B, n int) ([]byte, *approval.Policy, *operations.Operation) {
	seed := func(c byte) []byte { s := make([]byte, 32); s[0] = c; return s }
	runner, agent, gera := keys.FromSeed(seed(1)), keys.FromSeed(seed(2)), keys.FromSeed(seed(3))
	trust := fmt.Sprintf("[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n\n[[principal]]\nid = \"agent\"\nroles = [\"agent\"]\nkey = %q\n\n[[principal]]\nid = \"gera\"\nroles = [\"gera\"]\nkey = %q\n", runner.Public(), agent.Public(), gera.Public())
	policy, err := approval.ParsePolicy("trust.toml", []byte(trust))
	if err != nil {
		b.Fatal(err)
	}
	ops, err := operations.Parse("bench.toml", []byte("[[operation]]\nname = \"noop\"\nprogram = \"/bin/true\"\nargs = [\"{param.n}\"]\ntargets = [\"staging\"]\n[operation.params.n]\npattern = \"[0-9]+\"\n"))
	if err != nil {
		b.Fatal(err)
	}
	op := ops[0]
	op.ProgramPath = "/bin/true"
	var w bytes.Buffer
	t0 := time.Now().UTC().Add(-time.Hour)
	prev, seq := "", uint64(0)
	emit := func(r *receipts.Receipt) {
		seq++
		r.Seq, r.Prev, r.Runner = seq, prev, "runner"
		env, err := approval.Sign(runner, receipts.PayloadType, r)
		if err != nil {
			b.Fatal(err)
		}
		line, _ := json.Marshal(env)
		prev = receipts.LineHash(line)
		w.Write(line)
		w.WriteByte('\n')
	}
	for i := 0; seq < uint64(n); i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		bd := operations.Bound{
			Operation: op.Name, OperationDigest: op.Digest, Target: "staging",
			Params: map[string]string{"n": fmt.Sprint(i)}, Argv: op.Argv("staging", map[string]string{"n": fmt.Sprint(i)}, operations.FilePlaceholder),
			ProgramSHA256: "sha256:" + fmt.Sprintf("%064x", 1), Cwd: "/", Env: []operations.EnvVar{}, Files: []operations.File{},
		}
		plan := &operations.Plan{Version: operations.PlanVersion, Fingerprint: operations.Fingerprint(&bd), Bound: bd, Mutating: true, Planner: "agent", Created: now}
		planEnv, _ := approval.Sign(agent, approval.TypePlan, plan)
		goEnv, _ := approval.Sign(gera, approval.TypeGera, approval.GeraDecision{
			Fingerprint: plan.Fingerprint, Decision: approval.Go, Uses: 1, Decider: "gera", Issued: now, Expires: now.Add(time.Hour),
		})
		dec, err := approval.Evaluate(approval.Input{Plan: planEnv, Evidence: []*approval.Envelope{goEnv}, Policy: policy, Op: op, Now: now})
		if err != nil {
			b.Fatal(err)
		}
		runID := fmt.Sprintf("%024x", i)
		emit(&receipts.Receipt{Kind: receipts.KindIntent, Time: now, RunID: runID, Intent: &receipts.Intent{
			Fingerprint: plan.Fingerprint, Operation: op, Plan: planEnv, Evidence: []*approval.Envelope{goEnv},
			Path: dec.Path, Anchor: dec.Anchor, Relied: []string{dec.Anchor}, PolicyDigest: policy.Digest,
			Signers: map[string]string{"agent": agent.Public().String(), "gera": gera.Public().String()},
		}})
		intentHash := prev
		if seq < uint64(n) {
			emit(&receipts.Receipt{Kind: receipts.KindOutcome, Time: now, RunID: runID, Outcome: &receipts.Outcome{Intent: intentHash}})
		}
	}
	return w.Bytes(), policy, op
}

// BenchmarkReplay replays the bench's journal as `prod-write replay`
// does, judged by the history (for CPU profiles: go test -bench Replay
// -cpuprofile). Throughput goals are measured by cmd/prod-write-bench.
func BenchmarkReplay(b *testing.B) {
	journal, policy, op := benchJournal(b, 20000)
	h, err := receipts.LoadHistory("", policy, []*operations.Operation{op})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rp := &receipts.Replayer{Policy: policy, History: h}
		sum, err := rp.Replay(bytes.NewReader(journal), func(receipts.Result) {})
		if err != nil || !sum.OK {
			b.Fatalf("replay: %+v %v", sum, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*20000), "ns/receipt")
}

// BenchmarkReplayIncremental compares replay --state of 1,000 new
// receipts on top of a journal of 20,000 (hashed again, not verified)
// with a full replay of the same 21,000: `go test -bench
// ReplayIncremental ./receipts/`.
func BenchmarkReplayIncremental(b *testing.B) {
	const base, added = 20000, 1000
	journal, policy, op := benchJournal(b, base+added)
	h, err := receipts.LoadHistory("", policy, []*operations.Operation{op})
	if err != nil {
		b.Fatal(err)
	}
	rp := &receipts.Replayer{Policy: policy, History: h}
	cut := bytes.Join(bytes.SplitAfter(journal, []byte("\n"))[:base], nil)
	_, s, err := rp.ReplayFrom(bytes.NewReader(cut), nil, func(receipts.Result) {})
	if err != nil {
		b.Fatal(err)
	}
	if s == nil {
		b.Fatal("the first 20,000 entries wrote no state")
	}
	for _, c := range []struct {
		name string
		from *receipts.ReplayState
	}{{"full", nil}, {"incremental", s}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				sum, _, err := rp.ReplayFrom(bytes.NewReader(journal), c.from, func(receipts.Result) {})
				if err != nil || !sum.OK || sum.Entries != base+added {
					b.Fatalf("replay: %+v %v", sum, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*added), "ns/new-receipt")
		})
	}
}
