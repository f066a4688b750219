package api

import (
	"io"
	"time"
)

// RunRequest asks for a run of the approved plan stored under Fingerprint
// (SPEC §6). Only Fingerprint is sent: the streams say where the program's
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
