package fastrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runapi"
)

// The exit statuses a run's answer can end in (sysexits; pkg/localapi's
// ExitCode is the one mapping of every other error, and a test in pkg/cli
// holds the two equal on these).
const (
	exitOK      = 0
	exitRefused = 77
)

// formatVersion is the format_version of the JSON lines printed here
// (localapi.FormatVersion, docs/JSON.md).
const formatVersion = 1

// Render renders the runner service's answer to a typed run (a
// runapi.Answer of a runapi.RunResult) on stderr, after the program's own
// output, and returns the exit status: the program's, 77 for a refusal, or
// the status the service judged an error to be. It is how `run` ends on
// the caller's side, in this small client and in the command tree alike
// (pkg/cli prints a run's result and its refusals with these functions).
func Render(body []byte, asJSON, errTTY bool, stderr io.Writer) int {
	var r runapi.RunResult
	notices, err := runapi.Decode(body, &r)
	for _, n := range notices {
		PrintNotice(stderr, asJSON, n)
	}
	if err == nil && r.Outcome != "ran" {
		err = errors.New("the runner service's run answered no outcome")
	}
	var refused *refusal.Error
	var apiErr *runapi.Error
	switch {
	case err == nil:
		return PrintRun(stderr, asJSON, errTTY, &r)
	case errors.As(err, &refused):
		PrintRefusal(stderr, asJSON, refused, exitRefused)
		return exitRefused
	case errors.As(err, &apiErr):
		PrintFailure(stderr, asJSON, Failure{Code: apiErr.Code, Exit: apiErr.Exit, Message: apiErr.Message, Hint: apiErr.Hint})
		return apiErr.Exit
	}
	PrintError(stderr, asJSON, err)
	return exitSoftware
}

// PrintNotice prints what a call told its caller besides its result: a
// warning always, a bridge's post only without --json.
func PrintNotice(w io.Writer, asJSON bool, n runapi.Notice) {
	if n.Kind == runapi.NoticeWarning || !asJSON {
		fmt.Fprintln(w, n)
	}
}

// PrintRun says what ran, after the program's own output, and returns the
// program's exit status: with --json the outcome line (docs/JSON.md), else
// a line for a person at a terminal, and always a line for a timeout (the
// program's own output may end mid-line).
func PrintRun(w io.Writer, asJSON, errTTY bool, r *runapi.RunResult) int {
	switch {
	case asJSON:
		PrintRan(w, r)
	case r.TimedOut:
		fmt.Fprintf(w, "prod-write: %s timed out after %s and was killed (exit %d); receipts %d and %d\n",
			r.Operation, r.Timeout, r.ExitCode, r.Intent, r.Receipt)
	case errTTY:
		// Scripts read the exit status.
		fmt.Fprintf(w, "prod-write: ran %s %.19s… (exit %d); receipts %d and %d\n",
			r.Operation, r.Fingerprint, r.ExitCode, r.Intent, r.Receipt)
	}
	return r.ExitCode
}

// PrintRan writes run's outcome line (its last line on stderr with --json,
// after the program's own output), encoded as JSON rather than with Go
// quoting, which differs for some bytes.
func PrintRan(w io.Writer, r *runapi.RunResult) {
	b, _ := json.Marshal(struct {
		FormatVersion int    `json:"format_version"`
		Outcome       string `json:"outcome"`
		Operation     string `json:"operation"`
		Fingerprint   string `json:"fingerprint"`
		ExitCode      int    `json:"exit_code"`
		Intent        uint64 `json:"intent"`
		Receipt       uint64 `json:"receipt"`
	}{r.FormatVersion, r.Outcome, r.Operation, r.Fingerprint, r.ExitCode, r.Intent, r.Receipt})
	fmt.Fprintf(w, "%s\n", b)
}

// PrintRefusal prints a refusal: docs/DESIGN.md §8's JSON object with --json (then
// the exit status and format_version, docs/JSON.md), else the code, the
// reason and what is missing.
func PrintRefusal(w io.Writer, asJSON bool, r *refusal.Error, exit int) {
	if asJSON {
		b, _ := json.Marshal(struct {
			Outcome string `json:"outcome"`
			*refusal.Error
			ExitCode      int `json:"exit_code"`
			FormatVersion int `json:"format_version"`
		}{"refused", r, exit, formatVersion})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, "prod-write: refused (%s): %s\n", r.Code, r.Reason)
	if len(r.Missing) > 0 {
		fmt.Fprintf(w, "prod-write: hint: missing: %s\n", strings.Join(r.Missing, "; "))
	}
}

// Failure is an error that is not a refusal, as the CLI prints it: its
// stable code (docs/JSON.md), the exit status, what to say and, without
// --json, an optional hint.
type Failure struct {
	Code    string
	Exit    int
	Message string
	Hint    string
}

// PrintFailure prints f: one JSON object with --json, else
// `prod-write: error: …` and an optional `prod-write: hint: …` line.
func PrintFailure(w io.Writer, asJSON bool, f Failure) {
	if asJSON {
		b, _ := json.Marshal(map[string]any{"format_version": formatVersion, "outcome": "error", "code": f.Code, "exit_code": f.Exit, "error": f.Message})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, "prod-write: error: %s\n", f.Message)
	if f.Hint != "" {
		fmt.Fprintf(w, "prod-write: hint: %s\n", f.Hint)
	}
}

// PrintError prints an internal error (exit 70) met after the request was
// sent, as the command tree prints one.
func PrintError(w io.Writer, asJSON bool, err error) {
	PrintFailure(w, asJSON, Failure{Code: "internal", Exit: exitSoftware, Message: err.Error()})
}
