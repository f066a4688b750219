package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// VSA is the SLSA Verification Summary Attestation's predicate type.
const VSA = receipts.VSAPredicateV1

// VerifyVSAOptions are `replay verify-vsa`'s inputs.
type VerifyVSAOptions struct {
	F       *Factory `json:"-"`
	VSA     string
	Journal string
	Pub     string
}

// NewCmdVerifyVSA builds `replay verify-vsa`.
func NewCmdVerifyVSA(f *Factory, runF func(*VerifyVSAOptions) error) *cobra.Command {
	opts := &VerifyVSAOptions{F: f}
	cmd := &cobra.Command{
		Use:   "verify-vsa VSA --journal FILE --pub KEY",
		Short: "Verify a VSA that replay --vsa wrote against a journal and CI's public key",
		Long: `verify-vsa checks a verification summary attestation that replay --vsa wrote,
exactly: the DSSE signature over the envelope's PAE under KEY, the in-toto
statement type and the SLSA VSA predicate type, that its subject's sha256 is
the hash of FILE's last line (replay's head) and its resourceUri counts
FILE's entries, and that replay's verdict was PASSED. replay --vsa prints the
command that verifies what it wrote.

KEY is CI's public key as trust.toml spells it (ed25519:BASE64, what keygen
and key public print), or a file holding that line or a PKIX PEM public key
(key public --pem).

Exit 0 when the VSA vouches for FILE, 77 when it does not (the reason is
printed), 65 when the VSA or KEY is malformed, 74 when a file cannot be read.`,
		Example: `  prod-write replay verify-vsa vsa.json --journal receipts.jsonl --pub ci.pem
  prod-write replay verify-vsa vsa.json --journal receipts.jsonl --pub ed25519:BASE64`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.VSA = args[0]
			if opts.Journal == "" || opts.Pub == "" {
				return &localapi.UsageError{Msg: "verify-vsa needs --journal and --pub"}
			}
			if runF != nil {
				return runF(opts)
			}
			return verifyVSARun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Journal, "journal", "", "the journal `FILE` the VSA is about")
	cmd.Flags().StringVar(&opts.Pub, "pub", "", "CI's public `KEY`: ed25519:BASE64, or a file holding it or a PEM public key")
	return cmd
}

func verifyVSARun(o *VerifyVSAOptions) error {
	r, err := localapi.VerifyVSA(api.VerifyVSARequest{VSA: o.VSA, Journal: o.Journal, Pub: o.Pub})
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printDoc(o.F.IO.Out, map[string]any{"vsa": r.VSA, "journal": r.Journal, "verified": r.Verified,
			"result": r.Result, "subject": r.Subject, "head": r.Head, "entries": r.Entries,
			"policy": r.Policy, "time_verified": r.TimeVerified, "key_id": r.KeyID})
	}
	fmt.Fprintf(o.F.IO.Out, "%s: verified: replay judged %s (%d entries, head %.12s…) PASSED at %s against policy %.19s…, signed by key %.12s…\n",
		r.VSA, r.Journal, r.Entries, r.Head, r.TimeVerified, r.Policy, r.KeyID)
	return nil
}
