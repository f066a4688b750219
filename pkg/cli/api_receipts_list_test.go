package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// A journal longer than a page is listed page by page, through the
// socket as in process, every line once; a page the caller made up that
// starts inside a line, or outside the journal, is refused (a part of a
// receipt would be read as another).
func TestAPIReceiptsListPages(t *testing.T) {
	w := newAPIWorld(t)
	runNoops(t, w, "ran")
	path := filepath.Join(w.h.dir, "state", "journal", "receipts.jsonl")
	run, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Its two lines again and again, and a line that is no receipt: more
	// lines than a page holds, and a problem on the second page.
	copies := localapi.ReceiptsListPage/2 + 10
	journal := append(bytes.Repeat(run, copies), "not a receipt\n"...)
	if err := os.WriteFile(path, journal, 0o600); err != nil {
		t.Fatal(err)
	}
	lines := 2*copies + 1
	ctx := context.Background()
	for _, im := range []struct {
		name string
		api  api.API
	}{{"in-process", localapi.API{Env: &w.local.Env}}, {"socket", localapi.ServiceClient{Env: &w.client.Env}}} {
		first, err := im.api.ReceiptsList(ctx, api.ReceiptsListRequest{})
		if err != nil {
			t.Fatalf("%s: %v", im.name, err)
		}
		if len(first.Entries) != localapi.ReceiptsListPage || first.Next == nil || first.Next.Line != localapi.ReceiptsListPage {
			t.Fatalf("%s: the first page has %d entries and goes on at %+v, want %d and a next page", im.name, len(first.Entries), first.Next, localapi.ReceiptsListPage)
		}
		second, err := im.api.ReceiptsList(ctx, api.ReceiptsListRequest{Page: first.Next})
		if err != nil {
			t.Fatalf("%s: %v", im.name, err)
		}
		if second.Next != nil || len(second.Entries) != lines-1-localapi.ReceiptsListPage || len(second.Problems) != 1 || second.Problems[0].Line != lines {
			t.Fatalf("%s: the second page has %d entries, problems %+v, next %+v; want %d entries, line %d a problem, no next", im.name, len(second.Entries), second.Problems, second.Next, lines-1-localapi.ReceiptsListPage, lines)
		}
		for i, e := range second.Entries {
			if e.Line != localapi.ReceiptsListPage+i+1 {
				t.Fatalf("%s: entry %d of the second page is line %d", im.name, i, e.Line)
			}
		}
		for _, page := range []api.ReceiptsListPage{
			{From: 1, To: int64(len(journal))},               // inside the first line
			{From: 0, To: int64(len(journal)) + 1},           // past the end
			{From: int64(len(run)), To: int64(len(run)) - 1}, // ends before it starts
			{From: -1, To: 10},
		} {
			_, err := im.api.ReceiptsList(ctx, api.ReceiptsListRequest{Page: &page})
			var usage *localapi.UsageError
			var apiErr *api.Error
			if !errors.As(err, &usage) && !(errors.As(err, &apiErr) && apiErr.Exit == ExitUsage) {
				t.Errorf("%s: page %+v: err = %v, want it refused as bad usage", im.name, page, err)
			}
		}
	}
	// The command, through either, prints every line once.
	var outs []string
	for _, cfg := range []string{filepath.Join(w.h.dir, "prod-write.toml"), w.clientConfig} {
		for _, json := range []bool{false, true} {
			var o, e strings.Builder
			f := w.factory(map[string]string{"PROD_WRITE_CONFIG": cfg, "PROD_WRITE_KEY": w.h.key("agent")})
			f.IO = &IOStreams{In: strings.NewReader(""), Out: &o, Err: &e}
			args := []string{"receipts", "list"}
			if json {
				args = append(args, "--json")
			}
			if code := Run(args, f); code != 0 {
				t.Fatalf("%q with %s: exit %d: %s", args, cfg, code, e.String())
			}
			want := lines - 1
			if !json {
				want++ // the heading
			}
			if n := strings.Count(o.String(), "\n"); n != want {
				t.Errorf("%q with %s prints %d lines, want %d", args, cfg, n, want)
			}
			if !strings.Contains(e.String(), fmt.Sprintf("line %d is not a receipt", lines)) {
				t.Errorf("%q with %s does not report line %d: %s", args, cfg, lines, e.String())
			}
			outs = append(outs, o.String())
		}
	}
	if outs[0] != outs[2] || outs[1] != outs[3] {
		t.Errorf("receipts list in process and through the service differ")
	}
}
