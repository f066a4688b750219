package netbackend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// oneShotBackend stands in for the CLI behind `prod-write mcp`: Plan
// "stores" a plan and Run "runs" one, each taking a little while, and both
// are counted, so that a test can tell what happened from what was answered.
type oneShotBackend struct {
	reg *operations.Registry

	mu     sync.Mutex
	stored int
	ran    int
}

func (b *oneShotBackend) Registry() (*operations.Registry, error) { return b.reg, nil }
func (b *oneShotBackend) Principal() (*approval.Principal, error) {
	return &approval.Principal{ID: "agent", Roles: []string{approval.RoleAgent}}, nil
}

func (b *oneShotBackend) Plan(req mcpapi.PlanRequest) (*api.PlanResult, error) {
	time.Sleep(2 * time.Millisecond)
	b.mu.Lock()
	b.stored++
	b.mu.Unlock()
	return &api.PlanResult{Plan: &operations.Plan{Fingerprint: "sha256:" + strings.Repeat("1", 64)}, Stored: true}, nil
}

func (b *oneShotBackend) Status(string) (any, *refusal.Error, error) {
	return map[string]any{"allowed": true}, nil, nil
}
func (b *oneShotBackend) Receipt(string) ([]json.RawMessage, error) { return nil, nil }

func (b *oneShotBackend) Wait(context.Context, string, time.Duration, func(string)) (any, *refusal.Error, bool, error) {
	return nil, nil, true, nil
}

func (b *oneShotBackend) Run(fp string, _ map[string][]byte) (*mcpapi.RunResult, error) {
	// Still running when stdin ends.
	time.Sleep(50 * time.Millisecond)
	b.mu.Lock()
	b.ran++
	b.mu.Unlock()
	return &mcpapi.RunResult{Outcome: "ran", Fingerprint: fp, Stdout: "done\n"}, nil
}

func (b *oneShotBackend) ErrorCode(error) string { return "internal" }

func newOneShotBackend(t *testing.T) *oneShotBackend {
	t.Helper()
	dir := t.TempDir()
	ops := "[[operation]]\nname = \"deploy\"\nprogram = \"true\"\ntargets = [\"staging\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "ops.toml"), []byte(ops), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := operations.Load(dir, []string{"/usr/bin", "/bin"})
	if err != nil {
		t.Fatal(err)
	}
	return &oneShotBackend{reg: reg}
}

const (
	initializeLine  = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"0"}}}`
	initializedLine = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
)

// reply is one JSON-RPC response as it appears on the server's stdout.
type reply struct {
	ID     json.RawMessage `json:"id"`
	Result *struct {
		IsError bool `json:"isError"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// serveOnce runs ServeMCP with stdin holding input and ending there, as a
// one-shot pipe does, and returns the replies by id ("null" for id null,
// in order) and ServeMCP's error.
func serveOnce(t *testing.T, b mcpapi.Backend, input string) (map[string]reply, []reply, error) {
	t.Helper()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Backend{}.ServeMCP(context.Background(), b, true, strings.NewReader(input), &out)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("ServeMCP did not return after stdin ended")
	}
	byID := map[string]reply{}
	var nulls []reply
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r reply
		if jerr := json.Unmarshal(sc.Bytes(), &r); jerr != nil {
			t.Fatalf("stdout line is not JSON: %v\n%s", jerr, sc.Bytes())
		}
		if string(r.ID) == "null" {
			nulls = append(nulls, r)
			continue
		}
		byID[string(r.ID)] = r
	}
	return byID, nulls, err
}

// In a one-shot pipe (initialize, a plan, a run, then EOF on stdin) every
// request already read is answered before the server exits: in 20 pipes,
// 20 plan replies and 20 run results, and no plan stored or run made
// without its reply. Before the fix (the SDK's transport alone) none was.
func TestServeMCPAnswersEveryRequestReadBeforeEOF(t *testing.T) {
	const pipes = 20
	b := newOneShotBackend(t)
	plan := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"plan_deploy","arguments":{"target":"staging"}}}`
	run := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run","arguments":{"fingerprint":"sha256:` + strings.Repeat("1", 64) + `"}}}`
	input := strings.Join([]string{initializeLine, initializedLine, plan, run}, "\n") + "\n"
	planned, ran := 0, 0
	for i := range pipes {
		storedBefore, ranBefore := b.stored, b.ran
		byID, nulls, err := serveOnce(t, b, input)
		if err != nil {
			t.Errorf("pipe %d: ServeMCP: %v", i, err)
		}
		if len(nulls) > 0 {
			t.Errorf("pipe %d: error replies: %+v", i, nulls)
		}
		for _, id := range []string{"1", "2", "3"} {
			r, ok := byID[id]
			if !ok {
				t.Errorf("pipe %d: request %s was not answered", i, id)
				continue
			}
			if r.Error != nil || r.Result == nil || r.Result.IsError {
				t.Errorf("pipe %d: request %s: %+v", i, id, r)
			}
		}
		b.mu.Lock()
		stored, runs := b.stored-storedBefore, b.ran-ranBefore
		b.mu.Unlock()
		if _, ok := byID["2"]; ok {
			planned++
		} else if stored > 0 {
			t.Errorf("pipe %d: a plan was stored and its reply never sent", i)
		}
		if _, ok := byID["3"]; ok {
			ran++
		} else if runs > 0 {
			t.Errorf("pipe %d: a run completed and its result never sent", i)
		}
	}
	if planned != pipes || ran != pipes {
		t.Errorf("%d of %d plan calls and %d of %d runs answered", planned, pipes, ran, pipes)
	}
}

// A malformed line gets a JSON-RPC error reply with id null (-32700 when
// it is not JSON, -32600 when it is JSON but not a JSON-RPC 2.0 message)
// and the server keeps serving: the requests after it are answered, and
// the server ends without error at EOF. Before the fix the first such line
// ended the session with an error (prod-write mcp exited 70).
func TestServeMCPAnswersMalformedLinesAndGoesOn(t *testing.T) {
	b := newOneShotBackend(t)
	bad := []struct {
		line string
		code int
	}{
		{`{not json`, -32700},
		{`{"jsonrpc":"2.0","method":1}`, -32600},
		{`[]`, -32600},
		{`{"jsonrpc":"1.0","id":7,"method":"ping"}`, -32600},
		{`[{"jsonrpc":"2.0","id":8,"method":"ping"}]`, -32600},
		{`{"jsonrpc":"2.0","id":{},"method":"ping"}`, -32600},
		{`"just a string"`, -32600},
		{`{"jsonrpc":"2.0","id":1} trailing`, -32700},
	}
	for _, tt := range bad {
		t.Run(tt.line, func(t *testing.T) {
			input := strings.Join([]string{
				initializeLine, initializedLine,
				tt.line,
				`{"jsonrpc":"2.0","id":4,"method":"ping"}`,
				tt.line,
				`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"plan_deploy","arguments":{"target":"staging"}}}`,
				tt.line, // the last line, and no newline after it
			}, "\n")
			byID, nulls, err := serveOnce(t, b, input)
			if err != nil {
				t.Errorf("ServeMCP: %v (the exit status would not be 0)", err)
			}
			if len(nulls) != 3 {
				t.Errorf("%d error replies with id null, want 3: %+v", len(nulls), nulls)
			}
			for _, r := range nulls {
				if r.Error == nil || r.Error.Code != tt.code || r.Error.Message == "" {
					t.Errorf("error reply %+v, want code %d", r, tt.code)
				}
			}
			for _, id := range []string{"1", "4", "5"} {
				if r, ok := byID[id]; !ok || r.Error != nil {
					t.Errorf("request %s after the malformed line: answered %v, %+v", id, ok, r)
				}
			}
			if r := byID["5"]; r.Result == nil || r.Result.IsError {
				t.Errorf("plan after the malformed line: %+v", r)
			}
		})
	}
}

// Two requests in progress with one id: the second is refused with an
// error of id null (so its reply cannot be taken for the first's), and the
// first is answered.
func TestServeMCPRefusesAnIDInUse(t *testing.T) {
	b := newOneShotBackend(t)
	run := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"fingerprint":"sha256:%s"}}}`, id, strings.Repeat("1", 64))
	}
	byID, nulls, err := serveOnce(t, b, strings.Join([]string{initializeLine, initializedLine, run(9), run(9)}, "\n")+"\n")
	if err != nil {
		t.Errorf("ServeMCP: %v", err)
	}
	if r, ok := byID["9"]; !ok || r.Result == nil {
		t.Errorf("the first request 9 was not answered: %+v", byID)
	}
	if len(nulls) != 1 || nulls[0].Error == nil || nulls[0].Error.Code != -32600 {
		t.Errorf("the second request 9: %+v", nulls)
	}
}

// A line longer than the bound is answered and skipped, not buffered
// without end, and the server goes on.
func TestServeMCPSkipsAnOverlongLine(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 16 MiB line")
	}
	b := newOneShotBackend(t)
	long := `{"jsonrpc":"2.0","id":6,"method":"ping","params":{"x":"` + strings.Repeat("a", 16<<20) + `"}}`
	byID, nulls, err := serveOnce(t, b, strings.Join([]string{initializeLine, long, `{"jsonrpc":"2.0","id":4,"method":"ping"}`}, "\n")+"\n")
	if err != nil {
		t.Errorf("ServeMCP: %v", err)
	}
	if len(nulls) != 1 || nulls[0].Error.Code != -32600 {
		t.Errorf("overlong line: %+v", nulls)
	}
	if _, ok := byID["4"]; !ok {
		t.Error("the request after the overlong line was not answered")
	}
	if _, ok := byID["6"]; ok {
		t.Error("the overlong request was served")
	}
}
