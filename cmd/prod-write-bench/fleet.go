package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/prod-write/prod-write/pkg/testservers"
)

// benchFleet measures the fleet store's cost model (docs/DESIGN.md §15): the
// DynamoDB requests a `run` makes, and the conditional writes that fail
// under 64 concurrent runs of one many-use Gera go. Every request passes
// through a counting proxy in front of dynalite (pkg/testservers); the
// proxy puts the item as it was into a failed conditional write's error,
// as DynamoDB does (ReturnValuesOnConditionCheckFailure) and dynalite
// does not, so the counts are DynamoDB's.
func benchFleet(dir string) result {
	endpoint, err := testservers.StartDynalite()
	if err != nil {
		fail(fmt.Errorf("dynalite (./scripts/test-deps.sh installs it): %w", err))
	}
	defer testservers.Stop()
	proxy := testservers.NewDynamoProxy(endpoint)
	defer proxy.Close()
	proxy.ReturnOld(true)
	env := testservers.Env("AKIDPRODWRITEBENCH", "bench-secret-key")

	pw(dir, env, "init", "--demo", ".")
	if err := os.WriteFile(filepath.Join(dir, "operations", "mark.toml"), []byte(testservers.MarkOp), 0o644); err != nil {
		fail(err)
	}
	cfgPath := filepath.Join(dir, "prod-write.toml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		fail(err)
	}
	i := bytes.Index(cfg, []byte("\n[store]"))
	if i < 0 {
		fail(errors.New("no [store] section in prod-write.toml"))
	}
	cfg = fmt.Appendf(cfg[:i+1], "[store]\nbackend = \"dynamodb\"\ntable = %q\nregion = %q\nendpoint = %q\n", testservers.Name("bench"), testservers.Region, proxy.URL)
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		fail(err)
	}
	pw(dir, env, "store", "init")

	type race struct {
		uses, runs           int
		ran, refused         int
		requests, failed     int
		writes               int
		perRun, failedPerWin float64
	}
	do := func(uses, runs int) race {
		marks := filepath.Join(dir, fmt.Sprint("marks-", uses))
		if err := os.MkdirAll(marks, 0o755); err != nil {
			fail(err)
		}
		fp := fpRE.FindString(string(pw(dir, env, "plan", "mark", "--target", "production", "--param", "dir="+marks, "--key", "keys/agent.key")))
		pw(dir, env, "gera", "go", fp, "--uses", fmt.Sprint(uses), "--key", "keys/gera.key")
		proxy.Counts()
		codes := make([]int, runs)
		var ready, wg sync.WaitGroup
		start := make(chan struct{})
		for i := range runs {
			ready.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(*bin, "run", fp, "--json")
				cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
				ready.Done()
				<-start
				err := cmd.Run()
				var ee *exec.ExitError
				switch {
				case err == nil:
				case errors.As(err, &ee):
					codes[i] = ee.ExitCode()
				default:
					codes[i] = -1
				}
			}()
		}
		ready.Wait()
		close(start)
		wg.Wait()
		c := proxy.Counts()
		r := race{uses: uses, runs: runs, requests: c.Total(), failed: c.FailedTotal(), writes: c.Requests["UpdateItem"]}
		for _, code := range codes {
			switch code {
			case 0:
				r.ran++
			case 77:
				r.refused++
			default:
				fail(fmt.Errorf("a run of a %d-use go exited %d", uses, code))
			}
		}
		if r.ran != uses {
			fail(fmt.Errorf("%d runs of a %d-use go ran, want %d", r.ran, uses, uses))
		}
		r.perRun = float64(r.requests) / float64(runs)
		r.failedPerWin = float64(r.failed) / float64(r.ran)
		return r
	}
	many := do(64, 64)
	five := do(5, 64)
	res := result{name: "fleet store: DynamoDB requests per run", ratio: many.perRun, goal: "≤ 3"}
	res.met = many.perRun <= 3 && many.failedPerWin <= 1
	for _, r := range []race{many, five} {
		x := fmt.Sprintf("%d racers, %d-use go: %d ran, %d refused; %.2f requests per run; %d consuming writes, %d failed: %.2f per success, %.2f per refused run",
			r.runs, r.uses, r.ran, r.refused, r.perRun, r.writes, r.failed, r.failedPerWin, float64(r.failed)/float64(max(r.refused, 1)))
		res.extra = append(res.extra, x)
		fmt.Printf("fleet: %s\n", x)
	}
	res.extra = append(res.extra, "goal for failed conditional writes: ≤ 1 per success on the 64-use go (a refused run costs its one failed write)")
	return res
}
