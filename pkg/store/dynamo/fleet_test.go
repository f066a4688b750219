package dynamo_test

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prod-write/prod-write/pkg/testservers"
	"github.com/prod-write/prod-write/receipts"
)

// race runs `run fp --json` runs times, spread over hosts and released at
// once, and returns how many passed the gate. Every other run must be
// refused as evidence_consumed.
func raceRuns(t *testing.T, hosts []*testservers.Deployment, fp string, runs int) int {
	t.Helper()
	results := make([]*testservers.Result, runs)
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	for i := range runs {
		d := hosts[i%len(hosts)]
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
	return ran
}

// intents counts the intent receipts across the hosts' journals, and
// checks that each journal replays clean.
func intents(t *testing.T, hosts []*testservers.Deployment) int {
	t.Helper()
	n := 0
	for _, d := range hosts {
		for _, r := range journal(t, d) {
			if r.Kind == receipts.KindIntent {
				n++
			}
		}
		if _, err := os.Stat(d.Path("state", "journal", "receipts.jsonl")); err == nil {
			d.Must("replay")
		}
	}
	return n
}

// Three runner hosts (separate state directories, runner keys and
// journals) on one table: 64 runs released at once execute a single-use
// approval exactly once, and a 5-use Gera go exactly five times.
func TestThreeHostRace(t *testing.T) {
	bin := testservers.Binary(t)
	for _, c := range []struct {
		name string
		uses int
	}{{"single-use", 1}, {"go-5-uses", 5}} {
		t.Run(c.name, func(t *testing.T) {
			a := hostA(t, bin, testservers.Dynalite(t))
			hosts := []*testservers.Deployment{a, another(t, a, "b"), another(t, a, "c")}
			marks := t.TempDir()
			fp := a.PlanMark(marks)
			if c.uses == 1 {
				a.Approve(fp)
			} else {
				a.Must("gera", "go", fp, "--uses", "5", "--key", "keys/gera.key")
			}
			const runs = 64
			if ran := raceRuns(t, hosts, fp, runs); ran != c.uses {
				t.Fatalf("%d of %d runs on 3 hosts passed the gate, want exactly %d", ran, runs, c.uses)
			}
			if n := testservers.Marks(t, marks); n != c.uses {
				t.Fatalf("the program ran %d times, want exactly %d", n, c.uses)
			}
			if n := intents(t, hosts); n != c.uses {
				t.Fatalf("%d intent receipts across the 3 journals, want %d", n, c.uses)
			}
		})
	}
}

// hostBehind makes a's deployment reach DynamoDB through a new proxy in
// front of dynalite.
func hostBehind(t *testing.T, a *testservers.Deployment, endpoint string) *testservers.DynamoProxy {
	t.Helper()
	p := testservers.NewDynamoProxy(endpoint)
	t.Cleanup(p.Close)
	cfg, err := os.ReadFile(a.Path("prod-write.toml"))
	if err != nil {
		t.Fatal(err)
	}
	a.WriteFile("prod-write.toml", strings.Replace(string(cfg), endpoint, p.URL, 1))
	return p
}

// The reply to each run's consuming write is lost (the write is carried
// out, the SDK retries it): no use is lost and no run is refused falsely.
// A single-use approval runs once, then is refused; a 5-use go runs five
// times, then is refused. A run makes 3 DynamoDB requests (plan, evidence,
// consume), plus the retry here.
func TestRunLostConsumeReply(t *testing.T) {
	bin := testservers.Binary(t)
	endpoint := testservers.Dynalite(t)
	for _, uses := range []int{1, 5} {
		t.Run(map[int]string{1: "single-use", 5: "go-5-uses"}[uses], func(t *testing.T) {
			a := hostA(t, bin, endpoint)
			marks := t.TempDir()
			fp := a.PlanMark(marks)
			if uses == 1 {
				a.Approve(fp)
			} else {
				a.Must("gera", "go", fp, "--uses", "5", "--key", "keys/gera.key")
			}
			p := hostBehind(t, a, endpoint)
			p.Drop(testservers.DropFirst("UpdateItem"))
			p.ReturnOld(true) // as DynamoDB answers the retry (TestConsumeLostReply covers dynalite's way)
			for i := range uses {
				p.Counts()
				if r := a.Run("run", fp, "--json"); r.Code != 0 {
					t.Fatalf("run %d of %d, its consuming reply lost: %s", i+1, uses, r)
				}
				c := p.Counts()
				if c.Dropped != 1 || c.Total() != 4 || c.Requests["GetItem"] != 1 || c.Requests["Query"] != 1 || c.Requests["UpdateItem"] != 2 {
					t.Fatalf("run %d: requests %v, %d replies lost; want GetItem, Query, UpdateItem and its one retry", i+1, c.Requests, c.Dropped)
				}
			}
			r := a.Expect(77, "run", fp, "--json")
			if !strings.Contains(r.Stderr, `"code":"evidence_consumed"`) || !strings.Contains(r.Stderr, "consumed by another run") {
				t.Fatalf("run once every use is spent: %s", r)
			}
			if n := testservers.Marks(t, marks); n != uses {
				t.Fatalf("the program ran %d times, want %d", n, uses)
			}
			if n := intents(t, []*testservers.Deployment{a}); n != uses {
				t.Fatalf("%d intent receipts, want %d", n, uses)
			}
		})
	}
}
