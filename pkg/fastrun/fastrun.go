// Package fastrun is `prod-write` itself: a small program that makes the
// hot call, `prod-write run FP` through a runner service, and hands every
// other command line to the command tree, prod-write-cli, installed beside
// it ([Main], [ExecTree]). An agent's run through the service is mostly
// the client's start-up, and a process that links the whole product (its
// registry, policy, journal, passkey and bridge code, and their package
// initialisation) starts in about twice the time of one that links only
// this package (docs/adr/0057-a-small-run-client.md). So this package
// links nothing of the domain: the configuration, the socket's wire, the
// run call's types (pkg/runapi) and how a run's answer is rendered
// (render.go), which the command tree prints with too.
//
// It never changes what a command does. It takes the command line only
// when it understands it in full, and it gives the line back to the command
// tree for anything it cannot finish before the request is sent (no
// configuration, no service socket, a service that cannot be reached, a
// descriptor that cannot be opened): the command tree then does exactly
// what it would have done, errors included. Once the request is sent, the
// call is the service's, and fastrun only relays its end.
//
// It runs as its caller, with no privilege: what it reads (its arguments,
// PROD_WRITE_CONFIG, PROD_WRITE_KEY, the configuration file, the working
// directory) is the caller's own, and it grants nothing.
package fastrun

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/runapi"
	"github.com/prod-write/prod-write/pkg/service"
)

// exitSoftware is the exit status of an internal error (cli.ExitSoftware,
// sysexits EX_SOFTWARE).
const exitSoftware = 70

// Env is what fastrun reads of its process; tests swap it.
type Env struct {
	Args      []string // without the program name
	LookupEnv func(string) (string, bool)
	Getwd     func() (string, error)
	Stdin     *os.File
	Stdout    *os.File
	Stderr    *os.File
	// Answer renders the service's answer to the typed run on stderr and
	// returns the exit status; nil is [Render]. Tests swap it.
	Answer func(body []byte, asJSON, errTTY bool, stderr io.Writer) int
}

// Line is a command line fastrun serves: `run FP` and the global flags.
type Line struct {
	Fingerprint string
	JSON        bool
	Config, Key string
}

// ParseRun recognises `run FP` with the global flags --json, --config and
// --key, in any order, as cobra parses them. Anything else (another
// command, another flag, a flag cobra would read differently, help) is not
// fastrun's to judge.
func ParseRun(args []string) (Line, bool) {
	var l Line
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || name == "" {
			return l, false // -h, -x, "--": cobra's to read
		}
		switch name {
		case "json":
			switch {
			case !hasValue, value == "true":
				l.JSON = true
			case value == "false":
				l.JSON = false
			default:
				return l, false
			}
		case "config", "key":
			if !hasValue {
				if i+1 >= len(args) {
					return l, false
				}
				i++
				value = args[i]
			}
			if name == "config" {
				l.Config = value
			} else {
				l.Key = value
			}
		default:
			return l, false
		}
	}
	if len(pos) != 2 || pos[0] != "run" {
		return l, false
	}
	l.Fingerprint = pos[1]
	return l, true
}

// Try makes the run call through the service when it can and returns its
// exit status, for the process to exit with (its signal handling is left
// in place); ok false means nothing was sent and the command line is the
// command tree's.
func Try(e Env) (code int, ok bool) {
	l, ok := ParseRun(e.Args)
	if !ok {
		return 0, false
	}
	if e.Answer == nil {
		e.Answer = Render
	}
	// No runtime.GOMAXPROCS(1) here any more: stopping the world to drop
	// a P cost about 0.7 ms of wall time a run in this small client, and
	// the signal thread below then started in parallel no more
	// (docs/adr/0057-a-small-run-client.md).
	//
	// ^C and kill reach the program as requests to the service; a client
	// that dies anyway changes nothing in the service's order. The first
	// signal.Notify of a process starts a thread for signals and waits for
	// it (0.3 ms): started here, it overlaps reading the configuration and
	// dialling, and it is in place before the request is sent, as before.
	sigs := make(chan os.Signal, 4)
	notified := make(chan struct{})
	go func() {
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		close(notified)
	}()
	defer func() {
		// Only when the command tree takes the line back: after a call
		// the process exits, and Stop would wait for the signal thread
		// again.
		if !ok {
			<-notified
			signal.Stop(sigs)
		}
	}()
	cwd, err := e.Getwd()
	if err != nil {
		return 0, false
	}
	env, _ := e.LookupEnv("PROD_WRITE_CONFIG")
	path, err := config.Find(l.Config, env, cwd)
	if err != nil {
		return 0, false
	}
	c, err := config.Load(path)
	if err != nil || c.Service.Socket == "" {
		return 0, false
	}
	key := l.Key
	if key == "" {
		key, _ = e.LookupEnv("PROD_WRITE_KEY")
	}

	// What the command tree's client hands over for run, in the same order:
	// the caller's streams, its working directory, its key.
	args, err := json.Marshal(runapi.RunRequest{Fingerprint: l.Fingerprint})
	if err != nil {
		return 0, false
	}
	req := service.Request{Op: runapi.RunOp, Args: args, JSON: l.JSON, API: runapi.Version}
	var files []*os.File
	add := func(name string, f *os.File) {
		req.FDs = append(req.FDs, name)
		files = append(files, f)
	}
	if e.Stdin != nil {
		add("stdin", e.Stdin)
	}
	// Progress lines are for a terminal: the service is told whether
	// stderr is one, and never sees it.
	_, err = unix.IoctlGetTermios(int(e.Stderr.Fd()), unix.TCGETS)
	req.ErrTTY = err == nil
	d, err := service.OpenDir(cwd)
	if err != nil {
		return 0, false
	}
	defer d.Close()
	add("cwd", d)
	if key != "" {
		k, err := service.OpenRead(key)
		if err != nil {
			return 0, false
		}
		defer k.Close()
		add("key", k)
	}
	conn, err := service.Dial(c.Service.Socket)
	if err != nil {
		return 0, false
	}
	defer conn.Close()
	<-notified
	res, err := service.Do(conn, req, files, service.Caller{LookupEnv: e.LookupEnv}, sigs, e.Stdout, e.Stderr)
	var notSent *service.NotSentError
	switch {
	case errors.As(err, &notSent):
		return 0, false
	case err != nil:
		// Sent: the run may have happened, so it is never made again.
		PrintError(e.Stderr, l.JSON, err)
		return exitSoftware, true
	case res.Failure != nil:
		// The service refused the call before taking it (busy, bad
		// request): nothing ran, and the command tree may ask again.
		return 0, false
	case res.Body == nil && res.Code == 0:
		PrintError(e.Stderr, l.JSON, errors.New("the runner service answered no typed result (is it older than this client?)"))
		return exitSoftware, true
	case res.Body == nil:
		// The service could not answer the call at all, and said why on
		// our stderr.
		return res.Code, true
	}
	return e.Answer(res.Body, l.JSON, req.ErrTTY, e.Stderr), true
}
