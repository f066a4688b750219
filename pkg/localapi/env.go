// Package localapi holds the application API (pkg/api) as this process
// reaches it (Env.Reach): in process (API, and the runner service's
// dispatch, ServiceHandler), or through the runner service's socket
// (ServiceClient); and what they depend on (Env: configuration, policy, store,
// registry, keys, clock, environment, the backends of prod-write-net, and
// the runner service's call when it answers one).
//
// It knows no cobra and no terminal, and it renders no result: the
// commands (pkg/cli) render the typed results on the caller's side, and
// the runner service sends them as data. What a call says besides its
// result is an api.Notice (Env.Notify): a warning (a registry file that is
// no operation, a bridge that could not be told), or where a decision was
// posted; the service sends them in its answer. Besides, it writes only
// progress lines on Env.IO.Err, where ErrTTY says a person reads them.
// run's program writes to the request's streams
// (docs/adr/0049-service-call-package.md,
// docs/adr/0050-notices-are-data.md).
package localapi

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// Streams are a call's standard streams: the program's for run, warnings
// and progress on Err. In the runner service they are the call's relay,
// never a descriptor the caller handed over.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
	// ErrTTY reports whether Err is a terminal: progress is shown only then.
	ErrTTY bool
}

// Env holds what the in-process API depends on; tests swap each field.
// The CLI's Factory embeds it.
type Env struct {
	IO *Streams
	// Notices, when set, hears every notice (Notify): the runner
	// service's collects them for its answer. Nil prints each on IO.Err.
	Notices func(api.Notice)

	Now       func() time.Time
	LookupEnv func(string) (string, bool)
	Getwd     func() (string, error)

	// AWS holds the distributed backends and Net the bridges and the MCP
	// server; both are nil in prod-write, which hands the commands that
	// need them to prod-write-net (handoff.go).
	AWS AWS
	Net Net
	// PostsDecisions is set by the commands that post to the bridges
	// (file, withdraw): Config hands them over when bridges are on.
	PostsDecisions bool
	// Args are the command line's arguments, for that hand-over.
	Args []string
	// Executable and Exec find and start prod-write-net; nil means
	// os.Executable and execve(2).
	Executable func() (string, error)
	Exec       func(path string, argv, env []string) error

	// JournalSync, if set, replaces the journal's fsync (tests: a failing
	// disk, the order of sync and exec).
	JournalSync func(*os.File) error

	// Global flags.
	ConfigPath string
	KeyPath    string
	JSON       bool

	// Call is set when the command runs inside the runner service for a
	// client (serve.go). Then every input the caller owns comes from the
	// Call's descriptors and questions, never from a path it names, nor
	// from this process's environment, working directory or limits.
	Call *servicecall.Call
	// Cfg is the configuration as found and parsed, before any hand-over.
	Cfg *config.Config
	// ViaMCP says a run was asked for over MCP (the decision log's
	// surface).
	ViaMCP bool
}

// Keyless is f as it asks the service what any caller may ask, as a
// completion or doctor does: with --json, no key and no environment
// handed over, no stdin, stderr dropped.
func (f *Env) Keyless() *Env {
	g := *f
	g.IO = &Streams{Out: io.Discard, Err: io.Discard}
	g.JSON = true
	g.KeyPath = ""
	g.LookupEnv = func(string) (string, bool) { return "", false }
	return &g
}

// Notify tells the caller n: through Notices, or as a line on IO.Err (a
// bridge post not with JSON, which has its document to print).
func (f *Env) Notify(n api.Notice) {
	switch {
	case f.Notices != nil:
		f.Notices(n)
	case f.IO == nil || f.IO.Err == nil:
	case n.Kind == api.NoticeWarning || !f.JSON:
		fmt.Fprintln(f.IO.Err, n)
	}
}

// Warn notifies a warning.
func (f *Env) Warn(format string, args ...any) {
	f.Notify(api.Notice{Kind: api.NoticeWarning, Text: fmt.Sprintf(format, args...)})
}
