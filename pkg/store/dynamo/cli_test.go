package dynamo_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/testservers"
	"github.com/prod-write/prod-write/receipts"
)

// These tests drive the prod-write binary as separate processes, the way
// runner hosts run it, against the shared dynalite.

func backends(table, endpoint string) string {
	return fmt.Sprintf("[store]\nbackend = \"dynamodb\"\ntable = %q\nregion = %q\nendpoint = %q\n", table, testservers.Region, endpoint)
}

func awsEnv() []string { return testservers.Env(testAccess, testSecret) }

// hostA makes a deployment on a new table, created by `store init`.
func hostA(t *testing.T, bin, endpoint string) *testservers.Deployment {
	t.Helper()
	a := testservers.NewDeployment(t, bin, filepath.Join(t.TempDir(), "host-a"), awsEnv())
	a.SetBackends(backends(testservers.Name("pw"), endpoint))
	r := a.Must("store", "init")
	if !strings.Contains(r.Stdout, "created") {
		t.Fatalf("store init did not create the table: %s", r)
	}
	return a
}

// hostB is a second runner host sharing a's table, registry and trust
// policy, with its own runner key (added to the policy), state and journal.
func hostB(t *testing.T, a *testservers.Deployment) *testservers.Deployment {
	t.Helper()
	return another(t, a, "b")
}

// another is one more runner host sharing a's table, registry and trust
// policy, named host-NAME, with its own runner key (runner-NAME, added to
// the policy), state and journal.
func another(t *testing.T, a *testservers.Deployment, name string) *testservers.Deployment {
	t.Helper()
	dir := filepath.Join(filepath.Dir(a.Dir), "host-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := &testservers.Deployment{T: t, Bin: a.Bin, Dir: dir, Env: a.Env}
	pub := strings.TrimSpace(b.Must("keygen", "--out", b.Path("runner.key")).Stdout)
	trust, err := os.OpenFile(a.Path("trust.toml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(trust, "\n[[principal]]\nid = \"runner-%s\"\nroles = [\"runner\"]\nkey = %q\n", name, pub)
	trust.Close()
	cfg, err := os.ReadFile(a.Path("prod-write.toml"))
	if err != nil {
		t.Fatal(err)
	}
	store := string(cfg[strings.Index(string(cfg), "\n[store]")+1:])
	b.WriteFile("prod-write.toml", fmt.Sprintf("registry = %q\ntrust = %q\nstate = \"state\"\nrunner_key = \"runner.key\"\nhost = \"host-%s\"\n\n%s",
		a.Path("operations"), a.Path("trust.toml"), name, store))
	return b
}

func journal(t *testing.T, d *testservers.Deployment) []*receipts.Receipt {
	t.Helper()
	f, err := os.Open(d.Path("state", "journal", "receipts.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*receipts.Receipt
	err = receipts.Scan(f, func(l receipts.Line) error {
		_, r, err := receipts.Decode(l.Bytes)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Two runner hosts (two state directories, two runner keys, two
// journals) share one DynamoDB table; 16 runs of one single-use approval,
// split across both and released at once, execute the program exactly
// once (docs/DESIGN.md §3 rule 7).
func TestMultiHostRace(t *testing.T) {
	bin := testservers.Binary(t)
	a := hostA(t, bin, testservers.Dynalite(t))
	b := hostB(t, a)
	marks := t.TempDir()
	fp := a.PlanMark(marks)
	a.Approve(fp)
	b.Expect(0, "status", fp) // host B sees the plan and the approval

	const runs = 16
	results := make([]*testservers.Result, runs)
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	for i := range runs {
		d := a
		if i%2 == 1 {
			d = b
		}
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			<-start
			results[i] = d.Run("run", fp, "--json")
		}()
	}
	ready.Wait()
	close(start)
	wg.Wait()

	ran := 0
	for i, r := range results {
		switch r.Code {
		case 0:
			ran++
		case 77:
			if !strings.Contains(r.Stderr, `"code":"evidence_consumed"`) {
				t.Errorf("run %d refused otherwise than evidence_consumed: %s", i, r)
			}
		default:
			t.Errorf("run %d: %s", i, r)
		}
	}
	if ran != 1 {
		t.Fatalf("%d of %d runs passed the gate, want exactly 1", ran, runs)
	}
	if n := testservers.Marks(t, marks); n != 1 {
		t.Fatalf("the program ran %d times, want exactly 1", n)
	}
	intents := 0
	for _, d := range []*testservers.Deployment{a, b} {
		for _, r := range journal(t, d) {
			if r.Kind == receipts.KindIntent {
				intents++
			}
		}
	}
	if intents != 1 {
		t.Fatalf("%d intent receipts across both journals, want 1", intents)
	}
	// Each host's journal replays clean on its own.
	for _, d := range []*testservers.Deployment{a, b} {
		if _, err := os.Stat(d.Path("state", "journal", "receipts.jsonl")); err == nil {
			d.Must("replay")
		}
	}
}

// With DynamoDB unreachable, run refuses (store_unavailable, exit 77)
// within seconds, and nothing runs and no receipt claims it did.
func TestDynamoOutageRefusesRun(t *testing.T) {
	bin := testservers.Binary(t)
	endpoint := testservers.Dynalite(t)
	a := hostA(t, bin, endpoint)
	marks := t.TempDir()
	fp := a.PlanMark(marks)
	a.Approve(fp)

	// The outage: the same table, its endpoint a closed port.
	cfg, err := os.ReadFile(a.Path("prod-write.toml"))
	if err != nil {
		t.Fatal(err)
	}
	a.WriteFile("prod-write.toml", strings.Replace(string(cfg), endpoint, "http://127.0.0.1:1", 1))

	r := a.Expect(77, "run", fp, "--json")
	var refusal struct{ Outcome, Code, Reason, Fingerprint string }
	lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &refusal); err != nil {
		t.Fatalf("last stderr line is not JSON: %v\n%s", err, r)
	}
	if refusal.Outcome != "refused" || refusal.Code != "store_unavailable" || refusal.Fingerprint != fp ||
		!strings.Contains(refusal.Reason, "cannot reach the service") {
		t.Fatalf("refusal %+v, want store_unavailable saying the store cannot be reached", refusal)
	}
	if r.Took > 10*time.Second {
		t.Fatalf("run took %s to refuse", r.Took)
	}
	if strings.Contains(r.Stderr, testSecret) {
		t.Fatalf("the refusal carries the secret key: %s", r)
	}
	r = a.Expect(77, "run", fp)
	if !strings.Contains(r.Stderr, "refused (store_unavailable)") {
		t.Fatalf("human output: %s", r)
	}
	if n := testservers.Marks(t, marks); n != 0 {
		t.Fatalf("the program ran %d times during the outage", n)
	}
	if js := journal(t, a); len(js) != 0 {
		t.Fatalf("the journal has %d entries after refused runs", len(js))
	}

	// The outage ends: the approval was never spent, and it runs once.
	a.WriteFile("prod-write.toml", string(cfg))
	a.Must("run", fp)
	if n := testservers.Marks(t, marks); n != 1 {
		t.Fatalf("the program ran %d times, want 1", n)
	}
}

// store init is idempotent, and says what it did in --json.
func TestStoreInitCommand(t *testing.T) {
	a := hostA(t, testservers.Binary(t), testservers.Dynalite(t))
	r := a.Must("store", "init", "--json")
	var out struct {
		Backend, Table, Status string
		Created                bool
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("%v: %s", err, r)
	}
	if out.Backend != "dynamodb" || out.Created || out.Status != "ACTIVE" || out.Table == "" {
		t.Fatalf("second store init: %+v", out)
	}
}
