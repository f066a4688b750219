package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/admin"
)

// KeyPublicOptions are `key public`'s inputs.
type KeyPublicOptions struct {
	F    *Factory `json:"-"`
	File string
	PEM  bool
}

// NewCmdKey builds `key`, whose one subcommand is `public`.
func NewCmdKey(f *Factory, runF func(*KeyPublicOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "key",
		Short:   "Show a key file's public half",
		Example: `  prod-write key public --pem ci.key > ci.pem`,
	}
	opts := &KeyPublicOptions{F: f}
	pub := &cobra.Command{
		Use:   "public [--pem] FILE",
		Short: "Print a private key file's public key",
		Long: `key public prints the public half of a private key file (one keygen wrote):
by default on one line, in the form trust.toml takes, as keygen printed it;
with --pem as a PKIX "PUBLIC KEY" PEM block, the form cosign verify-blob
--key, openssl and other tools take (docs/REPLAY.md).`,
		Example: `  prod-write key public /var/lib/prod-write/runner.key
  prod-write key public --pem /var/lib/prod-write/runner.key > runner.pem`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if runF != nil {
				return runF(opts)
			}
			return keyPublicRun(opts)
		},
	}
	pub.Flags().BoolVar(&opts.PEM, "pem", false, "print a PKIX PEM public key (\"-----BEGIN PUBLIC KEY-----\")")
	cmd.AddCommand(pub)
	return cmd
}

func keyPublicRun(o *KeyPublicOptions) error {
	r, err := admin.KeyPublic(o.File)
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printJSON(o.F.IO.Out, r)
	}
	if o.PEM {
		_, err := io.WriteString(o.F.IO.Out, r.PEM)
		return err
	}
	fmt.Fprintln(o.F.IO.Out, r.PublicKey)
	return nil
}
