package runner

import (
	"fmt"
	"strings"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// Reality recomputes the fingerprint from the program, files, cwd and
// environment as they are now (docs/DESIGN.md §3 rule 2), hashing through d (file
// parameters read as r's caller has them).
func (pc *PlanContext) Reality(r *Runner, d operations.Digester) error {
	req := pc.Plan.Request(r.PassEnv)
	req.ResolveDir = r.ResolveDir
	if r.CallerCwd != nil {
		// The directory the caller handed over now, not the one the plan
		// names: the fingerprint then says whether they are the same.
		cwd, err := r.CallerCwd()
		if err != nil {
			if rf, ok := refusal.As(err); ok {
				rf.Fingerprint = pc.Plan.Fingerprint
				return rf
			}
			return pc.Refuse(refusal.FingerprintMismatch, "reality no longer matches the plan: cwd: %v", err).Needs("a new plan of what is there now")
		}
		req.Cwd = cwd
	}
	files := r.CallerFiles(d)
	files.Bound = map[string]string{}
	for _, fl := range pc.Plan.Files {
		files.Bound[fl.Name] = fl.SHA256
	}
	now, err := pc.Op.Resolve(req, files)
	if err != nil {
		if rf, ok := refusal.As(err); ok {
			rf.Fingerprint = pc.Plan.Fingerprint
			return rf
		}
		return fmt.Errorf("recomputing the fingerprint: %w", err)
	}
	if pre := pc.Plan.Precondition; pre != nil {
		// The precondition is not read from the file system: run runs
		// the check again and the gate judges its output.
		now.Precondition = pre
		now.Fingerprint = operations.Fingerprint(&now.Bound)
	}
	if now.Fingerprint == pc.Plan.Fingerprint {
		return nil
	}
	return pc.Refuse(refusal.FingerprintMismatch, "reality no longer matches the plan: %s", strings.Join(differences(pc.Plan, now), "; ")).Needs("a new plan of what is there now")
}

// differences names what changed between two resolutions of a plan,
// without printing any value (a pass variable may still be sensitive).
func differences(was, now *operations.Plan) []string {
	var out []string
	if was.ProgramSHA256 != now.ProgramSHA256 {
		out = append(out, "the program's bytes changed")
	}
	if (was.Interpreter == nil) != (now.Interpreter == nil) || (was.Interpreter != nil && *was.Interpreter != *now.Interpreter) {
		out = append(out, "the program's \"#!\" interpreter changed")
	}
	if was.Cwd != now.Cwd {
		out = append(out, "the working directory resolves elsewhere")
	}
	if strings.Join(was.Argv, "\x00") != strings.Join(now.Argv, "\x00") {
		out = append(out, "argv changed")
	}
	files := map[string]operations.File{}
	for _, fl := range now.Files {
		files[fl.Name] = fl
	}
	for _, fl := range was.Files {
		if n := files[fl.Name]; n.SHA256 != fl.SHA256 || n.Size != fl.Size {
			out = append(out, fmt.Sprintf("file %s changed", fl.Name))
		}
	}
	env := map[string]operations.EnvVar{}
	for _, e := range now.Env {
		env[e.Name] = e
	}
	for _, e := range was.Env {
		if n := env[e.Name]; n != e {
			out = append(out, fmt.Sprintf("environment variable %s changed", e.Name))
		}
	}
	if len(out) == 0 {
		out = append(out, "the operation definition changed")
	}
	return out
}
