package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// benchRunMCP is run-service's row with a client that is not a process
// per run: an agent's long-lived `prod-write mcp --allow-run` session
// through the same service, its run tool called once per round, timed
// from the call written to its answer read, interleaved with the floor
// and sudo -n /bin/true as run-service is. CPU per run is the MCP
// process's and the service's, from /proc, over all the rounds. This row
// has no goal of its own: it measures the design's answer to run-service's
// goals (ADR 0056).
func benchRunMCP(dir string) result {
	fp := approvedTrue(dir, 1, *runs+10)[0]
	env, stop := startService(dir)
	defer stop()
	cmd := exec.Command(*bin, "mcp", "--allow-run", "--key", "keys/agent.key")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		fail(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		fail(err)
	}
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	s := &mcpSession{in: in, out: bufio.NewReader(outPipe)}
	s.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "prod-write-bench", "version": "0"}})
	s.notify("notifications/initialized")
	run := func() {
		res := s.call("tools/call", map[string]any{"name": "run", "arguments": map[string]any{"fingerprint": fp}})
		var r struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Outcome string `json:"outcome"`
			} `json:"structuredContent"`
		}
		if err := json.Unmarshal(res, &r); err != nil || r.IsError || r.StructuredContent.Outcome != "ran" {
			fail(fmt.Errorf("run over MCP: %v: %s", err, res))
		}
	}
	m := againstFloor(dir, *floorBin, func() (time.Duration, time.Duration) {
		before := processCPU(servicePID) + processCPU(cmd.Process.Pid)
		t := time.Now()
		run()
		return time.Since(t), processCPU(servicePID) + processCPU(cmd.Process.Pid) - before
	}, nil)
	fl, rl, sl, floorCPU, runCPU := m.floor, m.run, m.sudo, m.floorCPU, m.runCPU
	fm, rm := median(fl), median(rl)
	r := result{name: "run-mcp wall time / floor (no goal: ADR 0056)", ratio: rm.Seconds() / fm.Seconds(), goal: "—", met: true}
	r.extra = []string{
		fmt.Sprintf("floor %v, run over one MCP session through the service %v (median of %d each)", fm.Round(time.Microsecond), rm.Round(time.Microsecond), *runs),
		fmt.Sprintf("CPU per run (MCP server and service) %v, the floor's %v: %.2f×",
			(runCPU / time.Duration(*runs)).Round(10*time.Microsecond), (floorCPU / time.Duration(*runs)).Round(10*time.Microsecond), runCPU.Seconds()/floorCPU.Seconds()),
	}
	if m.sudoFound {
		sm := median(sl)
		r.extra = append(r.extra, fmt.Sprintf("sudo -n /bin/true %v: run over MCP is %.2f× the peer", sm.Round(time.Microsecond), rm.Seconds()/sm.Seconds()))
	}
	for _, x := range r.extra {
		fmt.Printf("run-mcp: %s\n", x)
	}
	return r
}

// mcpSession is a client of an MCP server on stdio: newline-delimited
// JSON-RPC, one call at a time.
type mcpSession struct {
	in  io.Writer
	out *bufio.Reader
	id  int
}

func (s *mcpSession) notify(method string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		fail(err)
	}
}

// call sends one request and returns its result, skipping the server's
// notifications and requests in between.
func (s *mcpSession) call(method string, params any) json.RawMessage {
	s.id++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": s.id, "method": method, "params": params})
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		fail(err)
	}
	for {
		line, err := s.out.ReadBytes('\n')
		if err != nil {
			fail(fmt.Errorf("MCP %s: %w", method, err))
		}
		var m struct {
			ID     *int            `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &m); err != nil {
			fail(fmt.Errorf("MCP %s: %w: %s", method, err, line))
		}
		if m.ID == nil || *m.ID != s.id || m.Method != "" {
			continue
		}
		if m.Error != nil {
			fail(fmt.Errorf("MCP %s: %s", method, m.Error))
		}
		return m.Result
	}
}
