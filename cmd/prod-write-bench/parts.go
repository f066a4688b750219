package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// benchRunParts explains run-service's CPU goal (≤ 1.3× the floor's CPU)
// by measuring what a run client must spend before it sends anything. In
// the same shuffled rounds it times the floor, a run through the service,
// and programs that are the client's start in parts (testdata/bench/parts):
// an empty Go program; the client's packages linked and initialised; and
// those packages plus each of the two things the client does before it
// sends a run, the relay of ^C and kill (signal.Notify) and reading its
// configuration. It then prints the CPU the goal leaves a client (1.3× the
// floor's, less the service's share of a run) beside those parts. Its
// ratio is the parts' CPU over that budget: above 1, no client that starts
// as a Go process and does both can meet the goal here, however little
// else it does. A last program does the least any Go client could: read
// the socket's path with BurntSushi/toml, install the relay and encode a
// request, linking nothing of prod-write's. The row has no goal of its
// own.
func benchRunParts(dir string) result {
	fp := approvedTrue(dir, 1, *runs+10)[0]
	env, stop := startService(dir)
	defer stop()
	client := filepath.Join(dir, "client.toml")
	floorDir := filepath.Join(dir, "floor")
	os.MkdirAll(floorDir, 0o700)
	probe := filepath.Join(*partsDir, "client")
	type side struct {
		what      string
		name      string
		args      []string
		isService bool
		wall      []time.Duration
		cpu, svc  time.Duration // all rounds': the process's own, the service's
		// The round's, counted once it is not a warm-up.
		last, lastCPU, lastSvc time.Duration
	}
	floor := &side{what: "the floor", name: *floorBin, args: []string{floorDir, "/bin/true"}}
	run := &side{what: "prod-write run through the service", name: *bin, args: []string{"run", fp}, isService: true}
	empty := &side{what: "an empty Go program", name: filepath.Join(*partsDir, "empty")}
	both := &side{what: "  and both", name: probe, args: []string{"both", client}}
	least := &side{what: "the least Go client (no package of ours)", name: filepath.Join(*partsDir, "minimal"), args: []string{client}}
	sides := []*side{
		floor, run, empty,
		{what: "the client's packages, initialised", name: probe, args: []string{"none"}},
		{what: "  and signal.Notify(SIGINT, SIGTERM)", name: probe, args: []string{"signals"}},
		{what: "  and config.Load of the client's file", name: probe, args: []string{"config", client}},
		both, least,
	}
	shuffledRounds(len(sides), func(k int) {
		s := sides[k]
		var svc time.Duration
		if s.isService {
			svc = processCPU(servicePID)
		}
		s.last, s.lastCPU = timeCmdCPU(dir, env, s.name, s.args...)
		if s.isService {
			s.lastSvc = processCPU(servicePID) - svc
		}
	}, func() {
		for _, s := range sides {
			s.wall = append(s.wall, s.last)
			s.cpu += s.lastCPU
			s.svc += s.lastSvc
		}
	})
	per := func(d time.Duration) time.Duration { return (d / time.Duration(*runs)).Round(10 * time.Microsecond) }
	r := result{name: "run-parts: a client's required start / its CPU budget", goal: "—", met: true}
	for _, s := range sides {
		line := fmt.Sprintf("%-42s wall %8v  CPU %8v", s.what, median(s.wall).Round(time.Microsecond), per(s.cpu))
		if s.isService {
			line += fmt.Sprintf(" (the client's own), the service's %v", per(s.svc))
		}
		r.extra = append(r.extra, line)
	}
	allowed := time.Duration(1.3 * float64(floor.cpu)) // client and service together
	budget := allowed - run.svc
	r.ratio = both.cpu.Seconds() / budget.Seconds()
	r.extra = append(r.extra,
		fmt.Sprintf("CPU ≤ 1.3× the floor's leaves a client %v a run beside the service's %v; an empty Go program costs %v, and one that only initialises the client's packages, installs the signal relay and reads the configuration %v: %.2f× the budget",
			per(budget), per(run.svc), per(empty.cpu), per(both.cpu), r.ratio))
	// The service's share could shrink at most to the floor's own work
	// (the floor less a Go process's start): the budget then.
	work := floor.cpu - empty.cpu
	r.extra = append(r.extra,
		fmt.Sprintf("with the service's share cut to the floor's own work (the floor less an empty Go program: %v), the budget would be %v: %.2f×",
			per(work), per(allowed-work), both.cpu.Seconds()/(allowed-work).Seconds()),
		fmt.Sprintf("the least a Go client could do, reading TOML, relaying signals and encoding JSON with no package of ours: %v, %.2f× the budget",
			per(least.cpu), least.cpu.Seconds()/budget.Seconds()))
	for _, x := range r.extra {
		fmt.Printf("run-parts: %s\n", x)
	}
	return r
}
