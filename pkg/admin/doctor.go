package admin

import (
	"context"
	"fmt"

	"github.com/prod-write/prod-write/pkg/doctor"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// DoctorResult is doctor's report, as its --json prints it.
type DoctorResult struct {
	// Account is whose reach was checked.
	Account       string           `json:"account"`
	Findings      []doctor.Finding `json:"findings"`
	FormatVersion int              `json:"format_version"`
	// OK is whether no finding is worse than info; Weak counts those
	// that are.
	OK   bool `json:"ok"`
	Weak int  `json:"-"`
}

// Doctor checks the configuration's files and keys for what the account
// as (the invoking one when "") could reach, and, when a service is
// configured, asks it what any caller may ask (doctor.Service). Weak
// findings are the result's, not an error: the CLI decides the exit.
func Doctor(ctx context.Context, env *localapi.Env, as string) (*DoctorResult, error) {
	c, err := env.Config()
	if err != nil {
		return nil, err
	}
	who, check := doctor.Current(), doctor.Check
	if as != "" {
		if who, err = doctor.Lookup(as); err != nil {
			return nil, &localapi.UsageError{Msg: fmt.Sprintf("--as %s: %v", as, err)}
		}
		check = doctor.CheckAs
	}
	findings := check(c, who)
	if c.Service.Socket != "" {
		// Through the API's socket client, handing over no key and no
		// environment.
		served, err := localapi.ServiceClient{Env: env.Keyless()}.Ops(ctx)
		digests := map[string]string{}
		if err == nil {
			for _, op := range served.Operations {
				digests[op.Name] = op.Digest
			}
		}
		reg, rerr := env.Registry(c)
		if rerr != nil {
			reg = nil
		}
		findings = append(findings, doctor.Service(c, digests, err, reg)...)
		if err == nil && served.PolicyDigest != "" {
			findings = append(findings, doctor.History(c, served.PolicyDigest, served.Operations, "the runner service", env.Now())...)
		}
	}
	r := &DoctorResult{Account: who.Name, Findings: localapi.NonNil(findings), FormatVersion: localapi.FormatVersion}
	for _, fd := range findings {
		if fd.Severity != doctor.Info {
			r.Weak++
		}
	}
	r.OK = r.Weak == 0
	return r, nil
}
