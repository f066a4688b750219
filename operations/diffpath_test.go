package operations_test

import (
	"strings"
	"testing"

	"github.com/prod-write/prod-write/operations"
)

// DiffPath expands the operation's diff_against; a caller's value can
// choose among the files it names, never leave the directory it names.
func TestDiffPath(t *testing.T) {
	src := `[[operation]]
name = "op"
program = "true"
targets = ["staging"]
[operation.params.site]
pattern = ".*"
[operation.files.conf]
max_size = "1KiB"
diff_against = "/etc/nginx/{target}/{param.site}.conf"
[operation.files.whole]
max_size = "1KiB"
diff_against = "/srv/{param.site}"
[operation.files.other]
max_size = "1KiB"
`
	ops, err := operations.Parse("x.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	op := ops[0]
	for _, tc := range []struct {
		file, site string
		want, err  string
	}{
		{file: "conf", site: "api", want: "/etc/nginx/staging/api.conf"},
		{file: "other", site: "api", want: ""},
		{file: "conf", site: "../../shadow", err: "not a path the operation names"},
		{file: "conf", site: "a/b", err: "not a path the operation names"},
		{file: "conf", site: "..", want: "/etc/nginx/staging/...conf"},
		{file: "whole", site: "..", err: "not a path the operation names"},
		{file: "whole", site: ".", err: "not a path the operation names"},
		{file: "whole", site: "", err: "not a path the operation names"},
		{file: "whole", site: "app.conf", want: "/srv/app.conf"},
		{file: "conf", site: "x\x00", err: "not a path the operation names"},
		{file: "conf", site: "", want: "/etc/nginx/staging/.conf"},
	} {
		got, err := op.DiffPath(tc.file, "staging", map[string]string{"site": tc.site})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("site %q: %q, %v; want %q", tc.site, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("site %q: %q, %v; want %q", tc.site, got, err, tc.want)
		}
	}
}

// [operation.requests] decides nothing the gate judges: it is not in the
// definition's digest, so changing it changes no fingerprint. diff_against
// is (it says what approvers were shown).
func TestRequestRulesAreNotInTheDigest(t *testing.T) {
	head := "[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = [\"t\"]\n[operation.files.f]\nmax_size = \"1KiB\"\n"
	digest := func(src string) string {
		t.Helper()
		ops, err := operations.Parse("x.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return ops[0].Digest
	}
	bare := digest(head)
	if got := digest(head + "[operation.requests]\nremind_after = \"5m\"\nescalate_github = \"@acme/dba\"\n"); got != bare {
		t.Errorf("request rules changed the digest")
	}
	if got := digest(strings.Replace(head, "max_size = \"1KiB\"\n", "max_size = \"1KiB\"\ndiff_against = \"/etc/x\"\n", 1)); got == bare {
		t.Errorf("diff_against did not change the digest")
	}
	for _, tc := range []struct{ rules, want string }{
		{"ttl = \"0s\"", "requests.ttl"},
		{"remind_after = \"-1m\"", "requests.remind_after"},
		{"escalate_after = \"soon\"", "requests.escalate_after"},
		{"escalate_github = \"@acme/dba **now**\"", "requests.escalate_github"},
		{"escalate_github = \"acme\"", "requests.escalate_github"},
		{"escalate_slack_channel = \"<!here>\"", "requests.escalate_slack_channel"},
		{"remind = \"5m\"", "unknown key"},
	} {
		_, err := operations.Parse("x.toml", []byte(head+"[operation.requests]\n"+tc.rules+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.rules, err, tc.want)
		}
	}
}
