// Package runapi is the part of prod-write's application API (pkg/api)
// that a client of the run call needs and nothing more: the run call's
// request and result, and the answer every call of the runner service comes
// back in (a result, a refusal or an error, and notices). pkg/api declares
// these same types as aliases, so there is one definition of each. It
// links nothing of the domain (no registry, policy, store or journal), so
// `prod-write run` through the runner service starts as a small program
// (pkg/fastrun, docs/adr/0057-a-small-run-client.md).
package runapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prod-write/prod-write/pkg/refusal"
)

// RunOp is the run call's name on the socket: pkg/api's table of calls
// declares the run call with it (api.CallRun), and the small run client
// (pkg/fastrun), which links nothing of pkg/api, sends it.
const RunOp = "run"

// Version is the version of the types on the socket. A field is only ever
// added under one version, never renamed or given another meaning.
const Version = 1

// RunRequest asks for a run of the approved plan stored under Fingerprint
// (docs/DESIGN.md §6). Only Fingerprint is sent: the streams say where the program's
// own input comes from and where its output goes, which is never part of
// the result (docs/adr/0036-the-service-never-waits-on-a-caller.md). In
// process they are the program's; through the runner service the client
// hands Stdin over as a descriptor and writes the Output messages the
// service relays to Stdout and Stderr. Stderr also hears the run's
// warnings and progress. A nil Stdin is no input (/dev/null), a nil Stdout
// or Stderr discards.
type RunRequest struct {
	Fingerprint string    `json:"fingerprint"`
	Stdin       io.Reader `json:"-"`
	Stdout      io.Writer `json:"-"`
	Stderr      io.Writer `json:"-"`
}

// RunResult is what a run did: the program ran and its intent and outcome
// receipts are durable, whatever its exit status. Its first seven fields
// are `run --json`'s outcome line (docs/JSON.md), which prints them alone;
// the others are for the text and for MCP.
type RunResult struct {
	FormatVersion int    `json:"format_version"`
	Outcome       string `json:"outcome"` // "ran"
	Operation     string `json:"operation"`
	Fingerprint   string `json:"fingerprint"`
	// ExitCode is the program's exit status: 128+N for signal N, 124 on
	// the operation's timeout.
	ExitCode int `json:"exit_code"`
	// Intent and Receipt are the journal sequence numbers of the run's
	// intent and outcome receipts.
	Intent  uint64 `json:"intent"`
	Receipt uint64 `json:"receipt"`
	// TimedOut says the program was killed on the operation's timeout,
	// Timeout.
	TimedOut bool          `json:"timed_out,omitempty"`
	Timeout  time.Duration `json:"timeout_ns,omitempty"`
	// UndeliveredBytes counts the bytes of the program's output the
	// caller was never given (the outcome receipt's undelivered_bytes);
	// absent when it got all of them.
	UndeliveredBytes int64 `json:"undelivered_bytes,omitempty"`
}

// Answer is the service's reply to a typed call: the result, or the
// refusal, or the error that stopped it, and what the call told its
// caller on the way.
type Answer struct {
	Result  json.RawMessage `json:"result,omitempty"`
	Refusal *refusal.Error  `json:"refusal,omitempty"`
	Error   *Error          `json:"error,omitempty"`
	Notices []Notice        `json:"notices,omitempty"`
}

// Notice is what a call tells its caller besides its result, as data the
// caller renders on its own side: a warning (something the call could not
// do and went on without: a bridge not told, a receipt not archived, a
// decision not logged), or a bridge post it made (a decision posted,
// marked withdrawn, a break-glass announced). The runner service sends
// them in its Answer and writes no text of its own
// (docs/adr/0050-notices-are-data.md).
type Notice struct {
	Kind string `json:"kind"` // Notice*
	// Text is one line, a whole sentence, without the "prod-write: " the
	// CLI puts before it.
	Text string `json:"text"`
	// Channel (slack, github) and URL say where a bridge post is.
	Channel string `json:"channel,omitempty"`
	URL     string `json:"url,omitempty"`
}

// The kinds of Notice.
const (
	NoticeWarning   = "warning"
	NoticePosted    = "posted"    // a decision posted to a bridge
	NoticeWithdrawn = "withdrawn" // a posted decision marked withdrawn
	NoticeNotified  = "notified"  // a break-glass announced on a bridge
)

// String is the notice as the CLI prints it on stderr, one line.
func (n Notice) String() string {
	if n.Kind == NoticeWarning {
		return "prod-write: warning: " + n.Text
	}
	return "prod-write: " + n.Text
}

// Error is a call that failed for a reason that is not a refusal, as the
// service reports it: its stable code (docs/JSON.md), the exit status it
// maps to, and what to say.
type Error struct {
	Code    string `json:"code"`
	Exit    int    `json:"exit"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Decode reads an Answer into result, or returns its refusal or error;
// its notices are returned in either case.
func Decode(b []byte, result any) ([]Notice, error) {
	var a Answer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("the runner service's answer: %w", err)
	}
	switch {
	case a.Refusal != nil:
		return a.Notices, a.Refusal
	case a.Error != nil:
		return a.Notices, a.Error
	case a.Result == nil:
		return a.Notices, errors.New("the runner service's answer holds no result")
	}
	if err := json.Unmarshal(a.Result, result); err != nil {
		return a.Notices, fmt.Errorf("the runner service's result: %w", err)
	}
	return a.Notices, nil
}
