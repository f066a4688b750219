package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/service"
)

// What a call tells its caller besides its result (here: a break-glass
// whose skipped approvers no bridge could tell) is a typed notice, the same
// in process and through the service. The service sends it in its answer
// and writes no text onto the call's stderr; the client renders it on its
// own side (the service answers with data,
// docs/adr/0050-notices-are-data.md). Without the service's collector, the
// warning would reach the client only as text on the call's stderr.
func TestNoticesAreDataEverywhere(t *testing.T) {
	w := newAPIWorld(t)
	local, client := w.as("cab")
	ctx := context.Background()
	collect := func(f *Factory) *[]api.Notice {
		var got []api.Notice
		f.Notices = func(n api.Notice) { got = append(got, n) }
		return &got
	}
	wantWarning := func(t *testing.T, how string, got []api.Notice) {
		t.Helper()
		if len(got) != 1 || got[0].Kind != api.NoticeWarning || !strings.Contains(got[0].Text, "no bridge is configured, so the skipped approvers") || strings.HasPrefix(got[0].Text, "prod-write:") {
			t.Errorf("%s: notices %+v, want the one warning that no approver was told", how, got)
		}
	}

	gotLocal := collect(local)
	fp := w.h.plan("noop", "--param", "name=alpha")
	if _, err := (localapi.API{Env: &local.Env}).BreakGlass(ctx, api.BreakGlassRequest{Fingerprint: fp, Reason: "api down", Incident: "INC-1"}); err != nil {
		t.Fatal(err)
	}
	wantWarning(t, "in process", *gotLocal)

	gotClient := collect(client)
	fp = w.h.plan("noop", "--param", "name=beta")
	if _, err := (localapi.ServiceClient{Env: &client.Env}).BreakGlass(ctx, api.BreakGlassRequest{Fingerprint: fp, Reason: "api down", Incident: "INC-2"}); err != nil {
		t.Fatal(err)
	}
	wantWarning(t, "through the service", *gotClient)

	// On the wire: the notice is in the answer, and nothing is on the
	// call's stderr.
	c, err := config.Load(w.clientConfig)
	if err != nil {
		t.Fatal(err)
	}
	fp = w.h.plan("noop", "--param", "name=gamma")
	var stdout, stderr bytes.Buffer
	b, err := service.APICall{
		Socket: c.Service.Socket, Op: "break-glass", API: api.Version,
		Args:   api.BreakGlassRequest{Fingerprint: fp, Reason: "api down", Incident: "INC-3"},
		Stdout: &stdout, Stderr: &stderr, Cwd: t.TempDir(), Key: w.h.key("cab"),
	}.Do(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ans api.Answer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Result == nil {
		t.Fatalf("no result: %s", b)
	}
	wantWarning(t, "in the answer", ans.Notices)
	if stdout.Len() != 0 || stderr.Len() != 0 {
		t.Errorf("the service wrote text for the caller: stdout %q, stderr %q", stdout.String(), stderr.String())
	}

	// The CLI renders it, on the caller's side, as the warning line it
	// always was.
	var text bytes.Buffer
	client.Notices, client.IO = nil, &IOStreams{Out: &bytes.Buffer{}, Err: &text}
	fp = w.h.plan("noop", "--param", "name=delta")
	if _, err := (localapi.ServiceClient{Env: &client.Env}).BreakGlass(ctx, api.BreakGlassRequest{Fingerprint: fp, Reason: "api down", Incident: "INC-4"}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text.String(), "prod-write: warning: break-glass ") || strings.Count(text.String(), "\n") != 1 {
		t.Errorf("the client printed %q, want one warning line", text.String())
	}
}
