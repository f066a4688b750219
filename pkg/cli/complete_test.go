package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// The plans-complete call lists the stored plans whose fingerprint starts
// with the prefix it is given, and takes nothing but lowercase hex digits
// (after an optional "sha256:") as a prefix.
func TestPlansWithPrefix(t *testing.T) {
	h := newRunHarness(t)
	plans := filepath.Join(h.dir, "state", "store", "plans")
	if err := os.MkdirAll(plans, 0o700); err != nil {
		t.Fatal(err)
	}
	a := strings.Repeat("ab", 32)
	b := "ac" + strings.Repeat("0", 62)
	for _, h := range []string{a, b} {
		if err := os.WriteFile(filepath.Join(plans, h+".json"), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		prefix string
		want   []string
		usage  bool
	}{
		{prefix: "", want: []string{"sha256:" + a, "sha256:" + b}},
		{prefix: "a", want: []string{"sha256:" + a, "sha256:" + b}},
		{prefix: "ab", want: []string{"sha256:" + a}},
		{prefix: "sha256:ac", want: []string{"sha256:" + b}},
		{prefix: "sha256:" + a, want: []string{"sha256:" + a}},
		{prefix: "ff"},
		{prefix: "AB", usage: true},
		{prefix: "../", usage: true},
		{prefix: "sha256:" + a + "0", usage: true},
	} {
		t.Run(tt.prefix, func(t *testing.T) {
			f := &Factory{Env: localapi.Env{IO: &IOStreams{Out: io.Discard}, Getwd: func() (string, error) { return h.dir, nil }, LookupEnv: func(string) (string, bool) { return "", false }}}
			r, err := localapi.API{Env: &f.Env}.PlansComplete(context.Background(), api.PlansCompleteRequest{Prefix: tt.prefix})
			var usage *localapi.UsageError
			if tt.usage != errors.As(err, &usage) || (!tt.usage && err != nil) {
				t.Fatalf("err = %v, want a usage error: %v", err, tt.usage)
			}
			var got []string
			if r != nil {
				got = r.Fingerprints
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("listed %q, want %q", got, tt.want)
			}
		})
	}
}
