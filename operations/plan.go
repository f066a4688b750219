package operations

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// Bound is everything the fingerprint binds (docs/DESIGN.md §4).
type Bound struct {
	Operation       string            `json:"operation"`
	OperationDigest string            `json:"operation_digest"`
	Target          string            `json:"target"`
	Params          map[string]string `json:"params"`
	// Argv is the program's argv with argv[0] the resolved absolute path. A
	// file parameter stands as "{file.NAME}": at run time it becomes the path
	// of the private snapshot.
	Argv          []string `json:"argv"`
	ProgramSHA256 string   `json:"program_sha256"`
	Cwd           string   `json:"cwd"`
	Env           []EnvVar `json:"env"`
	Files         []File   `json:"files"`
	// Precondition is the operation's precondition check as planned
	// (docs/adr/0025-preconditions.md). Absent for an operation without
	// one, and then the fingerprint is what it always was.
	Precondition *PreconditionBound `json:"precondition,omitempty"`
	// Interpreter is the "#!" interpreter of a program that is a script:
	// part of what runs, so bound by path and hash (docs/FORMAT.md, field
	// 12). Absent for any other program, whose fingerprint is unchanged.
	Interpreter *InterpreterBound `json:"interpreter,omitempty"`
}

// InterpreterBound is a script's interpreter as planned: the path its
// "#!" line names, which the kernel opens, and the sha256 of its bytes.
type InterpreterBound struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// maxShebang is how much of a script's first line the kernel reads for
// its "#!" (BINPRM_BUF_SIZE).
const maxShebang = 256

// InterpreterReader is a [Digester] that says which "#!" interpreter the
// program it just hashed names ("" for none), from the bytes it hashed
// where it can. Resolve binds that interpreter.
type InterpreterReader interface {
	Interpreter(programPath string) (string, error)
}

// Interpreter implements [InterpreterReader].
func (h HashDigester) Interpreter(programPath string) (string, error) {
	return ReadInterpreter(programPath)
}

// ReadInterpreter returns the interpreter a "#!" line at the start of the
// file at path names, or "" when the file does not start with "#!". The
// kernel opens that path (with at most one argument after it) to run the
// script. A relative one would be resolved against the working directory
// of whoever runs it, so it is an error.
func ReadInterpreter(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, maxShebang)
	n, err := io.ReadFull(f, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", err
	}
	return ParseShebang(buf[:n])
}

// ParseShebang is ReadInterpreter of a file's first bytes.
func ParseShebang(head []byte) (string, error) {
	line, ok := strings.CutPrefix(string(head), "#!")
	if !ok {
		return "", nil
	}
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	line = strings.TrimLeft(line, " \t")
	if i := strings.IndexAny(line, " \t"); i >= 0 {
		line = line[:i]
	}
	if line == "" {
		return "", errors.New("its \"#!\" line names no interpreter")
	}
	if !filepath.IsAbs(line) {
		return "", fmt.Errorf("its \"#!\" interpreter %q is not an absolute path", line)
	}
	return line, nil
}

// PreconditionBound is what a plan binds of its precondition: the check
// operation, the fingerprint of the check's own plan (its program, argv,
// environment, cwd, target and params), and the sha256 of the check's
// stdout when it was planned.
type PreconditionBound struct {
	Check            string `json:"check"`
	CheckFingerprint string `json:"check_fingerprint"`
	OutputSHA256     string `json:"output_sha256"`
}

// PreconditionSeen is what run saw when it ran a plan's precondition check
// again: the check's fingerprint, the run that did it (its receipts), its
// exit status and the sha256 of its stdout, and the check's own signed
// plan, by which the gate judges that the check is the operation's
// precondition for this plan. The intent keeps it, so replay asks the gate
// the same question run did (docs/adr/0032-the-gate-judges-the-precondition-check.md).
type PreconditionSeen struct {
	CheckFingerprint string         `json:"check_fingerprint"`
	RunID            string         `json:"run_id"`
	ExitCode         int            `json:"exit_code"`
	OutputSHA256     string         `json:"output_sha256"`
	CheckPlan        *dsse.Envelope `json:"check_plan,omitempty"`
}

// EnvVar is one variable of the program's environment as bound.
type EnvVar struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Value string `json:"value,omitempty"`
}

// File is one file parameter as bound. Path is where it was read from; the
// fingerprint binds its name, size and digest.
type File struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// PlanVersion is the version of the plan payload.
const PlanVersion = 1

// Plan is one resolved invocation of an operation: the payload of a signed
// plan record.
type Plan struct {
	Version     int    `json:"version"`
	Fingerprint string `json:"fingerprint"`
	Bound
	Mutating bool      `json:"mutating"`
	Planner  string    `json:"planner,omitempty"`
	Created  time.Time `json:"created,omitzero"`
	// PreconditionOutput is the check's stdout when planned, kept only
	// when the operation says show_output and it is small enough
	// (docs/adr/0025-preconditions.md). Its digest is bound.
	PreconditionOutput *string `json:"precondition_output,omitempty"`
}

// Check reports whether the plan's fingerprint is the one its bound inputs
// give.
func (p *Plan) Check() error {
	if p.Version != PlanVersion {
		return refusal.New(refusal.SignatureInvalid, "plan version %d is not one this prod-write reads (%d)", p.Version, PlanVersion).For(p.Operation, p.Fingerprint)
	}
	for what, names := range map[string][]string{"env": envNames(p.Env), "file": fileNames(p.Files)} {
		seen := map[string]bool{}
		for _, n := range names {
			if seen[n] {
				return refusal.New(refusal.FingerprintMismatch, "the plan binds %s %q twice, so its fingerprint is ambiguous", what, n).For(p.Operation, p.Fingerprint)
			}
			seen[n] = true
		}
	}
	if p.PreconditionOutput != nil {
		sum := sha256.Sum256([]byte(*p.PreconditionOutput))
		if p.Precondition == nil || p.Precondition.OutputSHA256 != "sha256:"+hex.EncodeToString(sum[:]) {
			return refusal.New(refusal.FingerprintMismatch, "the plan shows a precondition output that is not the one it binds").For(p.Operation, p.Fingerprint)
		}
	}
	if got := Fingerprint(&p.Bound); got != p.Fingerprint {
		return refusal.New(refusal.FingerprintMismatch, "the plan's recorded inputs give %s, not the fingerprint it claims", got).For(p.Operation, p.Fingerprint)
	}
	return nil
}

func envNames(env []EnvVar) []string {
	out := make([]string, len(env))
	for i, e := range env {
		out[i] = e.Name
	}
	return out
}

func fileNames(files []File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Name
	}
	return out
}

// Request is what a caller asks to plan.
type Request struct {
	Operation string
	Target    string
	Params    map[string]string
	Files     map[string]string // file param name → path, relative to Cwd
	Cwd       string            // the caller's working directory
	Getenv    func(string) (string, bool)
	// ResolveDir resolves the working directory; nil means [ResolveDir].
	// A privileged prod-write passes one that looks as the caller.
	ResolveDir func(string) (string, error)
	// Inline says every file was supplied inline, as content, not named
	// by a path (MCP over HTTP): each path must be [InlinePath] of its
	// name, and binds no place on any disk
	// (docs/adr/0039-inline-files-over-mcp-http.md).
	Inline bool
}

// inlinePrefix begins the path a plan binds for a file supplied inline.
// No path a caller names ever begins so: a relative one is joined to the
// working directory, and an absolute one begins with "/".
const inlinePrefix = "inline:"

// InlinePath is the path a plan binds for file parameter name supplied
// inline: it says so, and names no file on the service's disk.
func InlinePath(name string) string { return inlinePrefix + name }

// InlineName reports whether path is a file supplied inline, and whose.
func InlineName(path string) (string, bool) {
	return strings.CutPrefix(path, inlinePrefix)
}

// Digester reads a file's bytes once and reports their size and sha256.
// max < 0 means no limit. Plan hashes files in place; run hashes the
// snapshots it will hand to the program.
type Digester interface {
	Digest(kind, name, path string, max int64) (size int64, sha256 string, err error)
}

// TooLargeError reports a file over its declared max_size.
type TooLargeError struct {
	Path string
	Max  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is larger than its max_size of %d bytes", e.Path, e.Max)
}

// Resolve validates req against the registry and binds it: program and
// file bytes through d, cwd resolved, environment built from the
// operation's env. Validation failures are refusals.
func (r *Registry) Resolve(req Request, d Digester) (*Plan, error) {
	op, ok := r.Get(req.Operation)
	if !ok {
		return nil, refusal.New(refusal.OperationAbsent, "no operation named %q is in the registry", req.Operation).For(req.Operation, "")
	}
	return op.Resolve(req, d)
}

// Resolve is [Registry.Resolve] for one operation.
func (op *Operation) Resolve(req Request, d Digester) (*Plan, error) {
	refuse := func(code refusal.Code, format string, args ...any) *refusal.Error {
		return refusal.New(code, format, args...).For(op.Name, "")
	}
	if op.Unavailable != "" || op.ProgramPath == "" {
		why := op.Unavailable
		if why == "" {
			why = fmt.Sprintf("operation %s has no resolved program on this host", op.Name)
		}
		needs := "program " + op.Program + " on this host's secure path"
		if op.ProgramPath != "" {
			needs = "a run_as account in the operation (docs/DEPLOYMENT.md)"
		}
		return nil, refuse(refusal.OperationUnavailable, "%s", why).Needs(needs)
	}
	if !slices.Contains(op.Targets, req.Target) {
		return nil, refuse(refusal.TargetNotAllowed, "operation %s does not allow target %q (allowed: %v)", op.Name, req.Target, op.Targets).Needs("target")
	}
	for _, name := range slices.Sorted(maps.Keys(req.Params)) {
		p, ok := op.Params[name]
		if !ok {
			return nil, refuse(refusal.ParamInvalid, "operation %s declares no param %q", op.Name, name)
		}
		if err := p.Validate(req.Params[name]); err != nil {
			return nil, refuse(refusal.ParamInvalid, "param %s: %v", name, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(op.Params)) {
		if _, ok := req.Params[name]; !ok {
			return nil, refuse(refusal.ParamInvalid, "param %s is required", name).Needs("param " + name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(req.Files)) {
		if _, ok := op.Files[name]; !ok {
			return nil, refuse(refusal.ParamInvalid, "operation %s declares no file %q", op.Name, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(op.Files)) {
		if _, ok := req.Files[name]; !ok {
			return nil, refuse(refusal.ParamInvalid, "file %s is required", name).Needs("file " + name)
		}
	}

	b := Bound{
		Operation:       op.Name,
		OperationDigest: op.Digest,
		Target:          req.Target,
		Params:          map[string]string{},
		Env:             []EnvVar{},
		Files:           []File{},
	}
	for k, v := range req.Params {
		b.Params[k] = v
	}

	cwd := op.Cwd
	if cwd == "" {
		cwd = req.Cwd
	}
	var err error
	resolveDir := req.ResolveDir
	if resolveDir == nil {
		resolveDir = ResolveDir
	}
	if b.Cwd, err = resolveDir(cwd); err != nil {
		return nil, &InputError{Err: fmt.Errorf("working directory: %w", err)}
	}

	_, sum, err := d.Digest("program", op.Name, op.ProgramPath, -1)
	if err != nil {
		return nil, fmt.Errorf("hashing program %s: %w", op.ProgramPath, err)
	}
	b.ProgramSHA256 = sum
	var interp string
	if ir, ok := d.(InterpreterReader); ok {
		if interp, err = ir.Interpreter(op.ProgramPath); err != nil {
			return nil, fmt.Errorf("reading program %s: %w", op.ProgramPath, err)
		}
	}
	if interp != "" {
		_, isum, err := d.Digest("interpreter", op.Name, interp, -1)
		if err != nil {
			return nil, fmt.Errorf("hashing the interpreter %s of program %s: %w", interp, op.ProgramPath, err)
		}
		b.Interpreter = &InterpreterBound{Path: interp, SHA256: isum}
	}

	for _, name := range slices.Sorted(maps.Keys(op.Files)) {
		path := req.Files[name]
		if req.Inline {
			// Never a path: what a caller with no file system of ours
			// claims of our disk would mislead whoever reads the plan.
			if path != InlinePath(name) {
				return nil, refuse(refusal.ParamInvalid, "file %s: supplied inline, it is bound as %s, not as a path", name, InlinePath(name))
			}
		} else {
			if !filepath.IsAbs(path) {
				path = filepath.Join(req.Cwd, path)
			}
			path = filepath.Clean(path)
		}
		size, sum, err := d.Digest("file", name, path, int64(op.Files[name].MaxSize))
		if err != nil {
			var tl *TooLargeError
			if errors.As(err, &tl) {
				return nil, refuse(refusal.ParamInvalid, "file %s: %v", name, err)
			}
			return nil, &InputError{Err: fmt.Errorf("file %s: %w", name, err)}
		}
		b.Files = append(b.Files, File{Name: name, Path: path, Size: size, SHA256: sum})
	}

	b.Argv = op.Argv(req.Target, req.Params, FilePlaceholder)

	getenv := req.Getenv
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	for _, n := range op.Env.Pass {
		if v, ok := getenv(n); ok {
			b.Env = append(b.Env, EnvVar{Name: n, Kind: EnvValue, Value: v})
		} else {
			b.Env = append(b.Env, EnvVar{Name: n, Kind: EnvUnset})
		}
	}
	for _, n := range op.Env.Secret {
		b.Env = append(b.Env, EnvVar{Name: n, Kind: EnvSecret})
	}
	for _, n := range slices.Sorted(maps.Keys(op.Env.Set)) {
		b.Env = append(b.Env, EnvVar{Name: n, Kind: EnvValue, Value: expand(op.Env.Set[n], req.Target, req.Params, nil)})
	}
	sort.Slice(b.Env, func(i, j int) bool { return b.Env[i].Name < b.Env[j].Name })

	return &Plan{
		Version:     PlanVersion,
		Fingerprint: Fingerprint(&b),
		Bound:       b,
		Mutating:    op.IsMutating(),
	}, nil
}

// FilePlaceholder is what stands for file parameter name in a bound argv.
func FilePlaceholder(name string) string { return "{file." + name + "}" }

// Request returns the request that resolves to p again, reading the
// environment through getenv. Run uses it to recompute the fingerprint
// from reality.
func (p *Plan) Request(getenv func(string) (string, bool)) Request {
	files := map[string]string{}
	inline := false
	for _, f := range p.Files {
		files[f.Name] = f.Path
		if _, ok := InlineName(f.Path); ok {
			inline = true
		}
	}
	return Request{Operation: p.Operation, Target: p.Target, Params: p.Params, Files: files, Cwd: p.Cwd, Getenv: getenv, Inline: inline}
}

// InputError is bad input data from the caller (exit 65), as opposed to a
// refusal or a broken configuration.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// ResolveDir returns dir as an absolute, cleaned, symlink-resolved path of
// an existing directory.
func ResolveDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", real)
	}
	return real, nil
}

// HashDigester hashes files where they are: what plan uses.
type HashDigester struct {
	// Progress, when set, is called as bytes are hashed.
	Progress func(name string, done, total int64)
}

// Digest implements [Digester].
func (h HashDigester) Digest(kind, name, path string, max int64) (int64, string, error) {
	// Check before opening: opening a FIFO blocks and opening a device can
	// have side effects. Then check what was opened, in case it changed.
	if fi, err := os.Stat(path); err != nil {
		return 0, "", err
	} else if !fi.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	return h.DigestFile(kind, name, f, path, max)
}

// DigestFile is Digest of a file already open, named path in messages: the
// runner service hashes what a caller opened and handed over.
func (h HashDigester) DigestFile(kind, name string, f *os.File, path string, max int64) (int64, string, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	if !fi.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%s is not a regular file", path)
	}
	if max >= 0 && fi.Size() > max {
		return 0, "", &TooLargeError{Path: path, Max: max}
	}
	var w io.Writer = io.Discard
	if h.Progress != nil && kind == "file" {
		w = &progressWriter{name: name, total: fi.Size(), fn: h.Progress}
	}
	// From byte 0 whatever the descriptor's offset: one handed over by a
	// runner service's client shares its offset with the caller.
	return HashReader(io.NewSectionReader(f, 0, math.MaxInt64), max, path, w)
}

// HashReader streams r into sha256 (and w), enforcing max when max >= 0.
func HashReader(r io.Reader, max int64, path string, w io.Writer) (int64, string, error) {
	sum := sha256.New()
	if max >= 0 {
		r = io.LimitReader(r, max+1)
	}
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			sum.Write(buf[:k])
			if w != io.Discard {
				if _, werr := w.Write(buf[:k]); werr != nil {
					return 0, "", werr
				}
			}
			n += int64(k)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, "", err
		}
	}
	if max >= 0 && n > max {
		return 0, "", &TooLargeError{Path: path, Max: max}
	}
	return n, "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}

type progressWriter struct {
	name       string
	done, last int64
	total      int64
	fn         func(string, int64, int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.done += int64(len(b))
	if p.done-p.last >= 64<<20 || p.done == p.total {
		p.last = p.done
		p.fn(p.name, p.done, p.total)
	}
	return len(b), nil
}
