package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// maxEnrollInput bounds what passkey enroll reads of a code or a
// registration response, on the caller's side (the service bounds it too).
const maxEnrollInput = 16 << 10

// NewCmdPasskey builds `passkey`: enrolling a principal's passkey
// (docs/adr/0043-passkey-assertions-as-evidence.md).
func NewCmdPasskey(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "passkey",
		Short: "Enrol a principal's passkey, for approvals its own device signs",
		Long: `A passkey enrolment is a WebAuthn registration at the approval page's origin
(trust.toml [passkey] origin), authorised by the principal's key or by a
one-time code an operator issues. It ends with the credential's id and public
key printed as a trust.toml snippet: root adds it under the principal, and
the policy stays root's. Removing the table revokes the credential.`,
		Example: `  sudo prod-write passkey code alice
  prod-write passkey enroll --code-file code.txt
  prod-write passkey enroll --key keys/alice.key`,
	}
	var ttl time.Duration
	code := &cobra.Command{
		Use:   "code PRINCIPAL [--ttl D]",
		Short: "Issue a one-time code that authorises one enrolment of PRINCIPAL (the service's operator)",
		Long: `code prints a one-time code, once: only its hash is kept. It authorises one
enrolment of PRINCIPAL within --ttl (default 15m, at most 24h). Only root or
the service's own account is answered.`,
		Example: "  sudo prod-write passkey code alice --ttl 1h",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return passkeyCode(f, args[0], ttl)
		},
	}
	code.Flags().DurationVar(&ttl, "ttl", 0, "how long the code stands (default 15m)")
	var enrollCode string
	enroll := &cobra.Command{
		Use:   "enroll [--code-file FILE | --key FILE]",
		Short: "Enrol a passkey on the approval page: print the link that runs the enrolment",
		Long: `enroll begins an enrolment and prints the approval page's link that runs it:
open it in a browser on the device that is to hold the passkey. The page has
the device make the credential, the service verifies it, and the page shows
the trust.toml snippet to give root. The enrolment is authorised by the
acting principal's key, or by the one-time code in --code-file (- for stdin),
which it spends; the link works once, for 5 minutes. The link carries the
ceremony's challenge: give it to nobody else.

Without an approval page ([bridge] page_listen), begin and finish run the
ceremony by hand.`,
		Example: `  prod-write passkey enroll --key keys/alice.key
  prod-write passkey enroll --code-file - < code.txt
  prod-write passkey enroll begin --key keys/alice.key > options.json
  prod-write passkey enroll finish response.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return passkeyEnrollOnPage(f, enrollCode)
		},
	}
	enroll.Flags().StringVar(&enrollCode, "code-file", "", "read the one-time code from `FILE` (- for stdin); not a flag's value, which ps shows")
	var codeFile string
	begin := &cobra.Command{
		Use:   "begin [--code-file FILE | --key FILE]",
		Short: "Begin an enrolment: print the WebAuthn creation options with the service's challenge",
		Long: `begin prints the credential creation options (JSON) that the approval page
hands to navigator.credentials.create. The enrolment is authorised by the
acting principal's key (an enrolment request it signs), or by the one-time
code in --code-file (- for stdin), which it spends. The answer is awaited
for 5 minutes.`,
		Example: "  prod-write passkey enroll begin --code-file - < code.txt > options.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return passkeyEnrollBegin(f, codeFile)
		},
	}
	begin.Flags().StringVar(&codeFile, "code-file", "", "read the one-time code from `FILE` (- for stdin); not a flag's value, which ps shows")
	finish := &cobra.Command{
		Use:   "finish RESPONSE",
		Short: "Finish an enrolment: verify the registration response and print the trust.toml snippet",
		Long: `finish hands the registration response (the JSON of the PublicKeyCredential
navigator.credentials.create returned; - for stdin) to the service, which
verifies it against the challenge it issued, once, and prints the credential
as a [[principal.passkey]] table for root to add under the principal.`,
		Example: "  prod-write passkey enroll finish response.json >> snippet.toml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return passkeyEnrollFinish(f, args[0])
		},
	}
	enroll.AddCommand(begin, finish)
	cmd.AddCommand(code, enroll)
	return cmd
}

// readInput reads what the caller names (a path, or - for stdin), bounded.
func readInput(f *Factory, name, what string) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		if f.IO.In == nil {
			return nil, &localapi.UsageError{Msg: what + ": no stdin"}
		}
		r = f.IO.In
	} else {
		fl, err := os.Open(name)
		if err != nil {
			return nil, &localapi.UsageError{Msg: fmt.Sprintf("%s: %v", what, err)}
		}
		defer fl.Close()
		r = fl
	}
	b, err := io.ReadAll(io.LimitReader(r, maxEnrollInput+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	if len(b) > maxEnrollInput {
		return nil, &localapi.UsageError{Msg: fmt.Sprintf("%s is over %d bytes", what, maxEnrollInput)}
	}
	return b, nil
}

func passkeyCode(f *Factory, principal string, ttl time.Duration) error {
	a, err := f.api()
	if err != nil {
		return err
	}
	res, err := a.PasskeyCode(context.Background(), api.PasskeyCodeRequest{Principal: principal, TTL: ttl})
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, res)
	}
	// The code on stdout alone, for a pipe; what it is on stderr.
	fmt.Fprintf(f.IO.Err, "one-time enrolment code for %s, until %s (shown once; give it to %s only):\n", res.Principal, res.Expires.Format(time.RFC3339), res.Principal)
	fmt.Fprintln(f.IO.Out, res.Code)
	return nil
}

// enrollRequest is the begin request with the code read from codeFile
// ("": authorised by the key).
func enrollRequest(f *Factory, codeFile string) (api.PasskeyEnrollBeginRequest, error) {
	var req api.PasskeyEnrollBeginRequest
	if codeFile != "" {
		b, err := readInput(f, codeFile, "the code file")
		if err != nil {
			return req, err
		}
		if req.Code = strings.TrimSpace(string(b)); req.Code == "" {
			return req, &localapi.UsageError{Msg: "the code file holds no code"}
		}
	}
	return req, nil
}

func passkeyEnrollOnPage(f *Factory, codeFile string) error {
	req, err := enrollRequest(f, codeFile)
	if err != nil {
		return err
	}
	req.Page = true
	a, err := f.api()
	if err != nil {
		return err
	}
	res, err := a.PasskeyEnrollBegin(context.Background(), req)
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, res)
	}
	// The link on stdout alone, for a pipe; what it is on stderr.
	fmt.Fprintf(f.IO.Err, "enrolment of %s begun (authorised by its %s): open this link, once, before %s, in a browser on the device that is to hold the passkey; the page shows the trust.toml snippet for root:\n",
		res.Principal, res.Authorised, res.Expires.Format(time.RFC3339))
	_, err = fmt.Fprintln(f.IO.Out, res.Page)
	return err
}

func passkeyEnrollBegin(f *Factory, codeFile string) error {
	req, err := enrollRequest(f, codeFile)
	if err != nil {
		return err
	}
	a, err := f.api()
	if err != nil {
		return err
	}
	res, err := a.PasskeyEnrollBegin(context.Background(), req)
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, res)
	}
	fmt.Fprintf(f.IO.Err, "enrolment of %s begun (authorised by its %s), awaited until %s: hand these options to navigator.credentials.create on the approval page, then: prod-write passkey enroll finish RESPONSE\n",
		res.Principal, res.Authorised, res.Expires.Format(time.RFC3339))
	_, err = fmt.Fprintf(f.IO.Out, "%s\n", res.Options)
	return err
}

func passkeyEnrollFinish(f *Factory, response string) error {
	b, err := readInput(f, response, "the registration response")
	if err != nil {
		return err
	}
	if !json.Valid(b) {
		return &localapi.UsageError{Msg: "the registration response is not JSON"}
	}
	a, err := f.api()
	if err != nil {
		return err
	}
	res, err := a.PasskeyEnrollFinish(context.Background(), api.PasskeyEnrollFinishRequest{Response: b})
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, res)
	}
	fmt.Fprintf(f.IO.Err, "passkey %s of %s verified: root adds this under [[principal]] id = %q in trust.toml\n", res.Credential, res.Principal, res.Principal)
	_, err = io.WriteString(f.IO.Out, res.Snippet)
	return err
}
