package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/keys"
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

// readPublic reads --pub: the trust.toml line itself, or a file holding
// it or a PKIX PEM block.
func readPublic(s string) (keys.Public, error) {
	if strings.HasPrefix(s, keys.PublicPrefix) {
		p, err := keys.ParsePublic(s)
		if err != nil {
			return nil, &localapi.DataError{Err: fmt.Errorf("--pub: %w", err)}
		}
		return p, nil
	}
	b, err := os.ReadFile(s)
	if err != nil {
		return nil, fmt.Errorf("--pub: %w", err)
	}
	var p keys.Public
	if line := strings.TrimSpace(string(b)); strings.HasPrefix(line, keys.PublicPrefix) {
		p, err = keys.ParsePublic(line)
	} else {
		p, err = keys.ParsePublicPEM(b)
	}
	if err != nil {
		return nil, &localapi.DataError{Err: fmt.Errorf("--pub %s: %w", s, err)}
	}
	return p, nil
}

func verifyVSARun(o *VerifyVSAOptions) error {
	pub, err := readPublic(o.Pub)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(o.VSA)
	if err != nil {
		return fmt.Errorf("reading the VSA: %w", err)
	}
	v, err := receipts.ParseVSA(b)
	if err != nil {
		return &localapi.DataError{Err: fmt.Errorf("%s: %w", o.VSA, err)}
	}
	in, err := os.Open(o.Journal)
	if err != nil {
		return fmt.Errorf("reading the journal: %w", err)
	}
	defer in.Close()
	head, entries, err := receipts.JournalHead(in)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Journal, err)
	}
	if err := v.Verify(pub, head, entries); err != nil {
		return fmt.Errorf("%s for %s: %w", o.VSA, o.Journal, err)
	}
	p := v.Statement.Predicate
	policy := "sha256:" + p.Policy.Digest["sha256"]
	if o.F.JSON {
		return printDoc(o.F.IO.Out, map[string]any{"vsa": o.VSA, "journal": o.Journal, "verified": true,
			"result": p.VerificationResult, "subject": v.Statement.Subject[0].Name, "head": head, "entries": entries,
			"policy": policy, "time_verified": p.TimeVerified, "key_id": pub.ID()})
	}
	fmt.Fprintf(o.F.IO.Out, "%s: verified: replay judged %s (%d entries, head %.12s…) PASSED at %s against policy %.19s…, signed by key %.12s…\n",
		o.VSA, o.Journal, entries, head, p.TimeVerified, policy, pub.ID())
	return nil
}
