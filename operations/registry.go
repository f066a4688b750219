// Package operations holds the operation registry (docs/DESIGN.md §9), the plan a
// caller resolves from it, and the fingerprint that binds a plan to reality
// (docs/DESIGN.md §4).
//
// # Registry
//
// Operations are declared in TOML files. [Load] decodes them strictly: an
// unknown key, a wrong type, a duplicate name, a placeholder that names no
// declared param or file, or a program that does not resolve on the secure
// path is a [*DefinitionError] naming the file and line. Every surface (CLI,
// MCP, bridges) reads this one registry.
package operations

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prod-write/prod-write/pkg/tomlpos"
)

// Approval paths an operation may accept (docs/DESIGN.md §3 rule 4), as stored: in
// an operation's definition (so in its digest, in every fingerprint made
// from it and in receipts) and in an intent receipt's path. People type and
// read PathRecordApprovals for PathSmithTrinity (ADR 0014): the loader
// takes either spelling and stores this one, so a definition's digest is
// the same whichever it says.
const (
	PathGera         = "gera"
	PathSmithTrinity = "smith+trinity"
	// PathRecordApprovals is the name people use for PathSmithTrinity:
	// an operator's certainty record plus approvers' approvals.
	PathRecordApprovals = "record+approvals"
	// PathBreakGlass lets a principal with the break-glass role run a
	// plan without the usual approvals, with compensating controls
	// (docs/adr/0028-break-glass.md). Only ever beside a usual
	// path: it is an escape from one, not a way of working.
	PathBreakGlass = "break-glass"
)

// DefaultBreakGlassTTL is how long a break-glass record lives by default,
// and the most an operation allows unless its break_glass_ttl says less.
const DefaultBreakGlassTTL = 15 * time.Minute

// MaxBreakGlassTTL bounds an operation's break_glass_ttl.
const MaxBreakGlassTTL = time.Hour

// PathName is the name people read for a stored approval path.
func PathName(p string) string {
	if p == PathSmithTrinity {
		return PathRecordApprovals
	}
	return p
}

// PathNames is PathName of each of paths.
func PathNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = PathName(p)
	}
	return out
}

// DefaultApprovalTTL is how long evidence lives when neither the operation
// nor the command line says otherwise (docs/DESIGN.md §5).
const DefaultApprovalTTL = time.Hour

// Operation is one declared production write.
type Operation struct {
	Name        string    `toml:"name" json:"name"`
	Description string    `toml:"description" json:"description"`
	Mutating    *bool     `toml:"mutating" json:"mutating"`
	Program     string    `toml:"program" json:"program"`
	Args        []string  `toml:"args" json:"args"`
	Targets     []string  `toml:"targets" json:"targets"`
	Timeout     *Duration `toml:"timeout" json:"timeout,omitempty"`
	Cwd         string    `toml:"cwd" json:"cwd,omitempty"`
	// RunAs is the account the program runs as under the runner service
	// (docs/DESIGN.md §13); in local mode, with no service, it is not used.
	RunAs    string            `toml:"run_as" json:"run_as,omitempty"`
	Params   map[string]Param  `toml:"params" json:"params,omitempty"`
	Files    map[string]FileIn `toml:"files" json:"files,omitempty"`
	Env      Env               `toml:"env" json:"env"`
	Approval Approval          `toml:"approval" json:"approval"`
	// Precondition, when set, is a read-only check whose output the plan
	// binds and run re-checks (docs/adr/0025-preconditions.md).
	// Absent, it leaves the definition's digest as it was.
	Precondition *Precondition `toml:"precondition" json:"precondition,omitempty"`
	// Requests override the deployment's [requests] for this operation's
	// decision requests: when to remind, when and where to escalate. They
	// decide nothing the gate judges, so they are not part of the
	// definition's digest: changing them leaves every plan's fingerprint
	// as it was (docs/adr/0027-what-approvers-see.md).
	Requests *RequestRules `toml:"requests" json:"requests,omitempty"`

	// Set by Load, not by the TOML file.
	ProgramPath string `toml:"-" json:"program_path"`
	// Unavailable says why the operation cannot run on this host: its
	// program does not resolve here (psql only on the database hosts).
	// The registry is shared by every host; an operation missing its
	// program on one is refused there (operation_unavailable) and nothing
	// else is affected. Empty when it is available.
	Unavailable string `toml:"-" json:"unavailable,omitempty"`
	Digest      string `toml:"-" json:"digest"`
	Source      string `toml:"-" json:"source"`
}

// Param is a typed parameter. A param with min or max, or type "integer",
// takes a base-10 integer; otherwise a string. Pattern must match the whole
// value.
type Param struct {
	Type        string   `toml:"type" json:"type"`
	Description string   `toml:"description" json:"description,omitempty"`
	Pattern     string   `toml:"pattern" json:"pattern,omitempty"`
	Enum        []string `toml:"enum" json:"enum,omitempty"`
	Min         *int64   `toml:"min" json:"min,omitempty"`
	Max         *int64   `toml:"max" json:"max,omitempty"`

	re *regexp.Regexp
}

// FileIn is a file parameter: its bytes are bound by the fingerprint and
// reach the program as a private read-only snapshot.
type FileIn struct {
	Description string `toml:"description" json:"description,omitempty"`
	MaxSize     Size   `toml:"max_size" json:"max_size"`
	// DiffAgainst names the file this one replaces in place, an absolute
	// path in which {target} and {param.NAME} are replaced: the bridges
	// show approvers a diff against it (docs/BRIDGES.md, "What approvers
	// see"). The path is the operation's; a caller only picks the target
	// and params it is expanded with, and a path outside bridge.diff_roots
	// is never read.
	DiffAgainst string `toml:"diff_against" json:"diff_against,omitempty"`
	// Secret says the file may hold a secret (a key, a credential being
	// installed): approvers are never shown its content, and none is kept
	// with the plan but what run needs (docs/adr/0063-file-content-kept-with-the-plan.md).
	Secret bool `toml:"secret" json:"secret,omitempty"`
}

// Env declares the program's whole environment; nothing else is inherited.
type Env struct {
	Pass   []string          `toml:"pass" json:"pass,omitempty"`
	Secret []string          `toml:"secret" json:"secret,omitempty"`
	Set    map[string]string `toml:"set" json:"set,omitempty"`
}

// Approval says which approval paths an operation accepts.
type Approval struct {
	Paths     []string  `toml:"paths" json:"paths"`
	Approvers int       `toml:"approvers" json:"approvers"`
	TTL       *Duration `toml:"ttl" json:"ttl,omitempty"`
	// BreakGlassTTL caps a break-glass record's lifetime
	// (docs/adr/0028-break-glass.md); absent, DefaultBreakGlassTTL. Omitted
	// from the definition when unset, so digests of operations without it
	// are unchanged.
	BreakGlassTTL *Duration `toml:"break_glass_ttl" json:"break_glass_ttl,omitempty"`
}

// BreakGlassCap is the longest a break-glass record of op may live.
func (op *Operation) BreakGlassCap() time.Duration {
	if op.Approval.BreakGlassTTL != nil {
		return op.Approval.BreakGlassTTL.Duration
	}
	return DefaultBreakGlassTTL
}

// Precondition names an operation's read-only check: another operation of
// the registry with mutating = false, run with the same target and the
// params given here (templates of {target} and {param.NAME} of this
// operation). Its stdout's digest is bound by every plan of the operation,
// and run runs it again before consuming anything: a different output
// refuses (precondition_changed). ShowOutput lets refusals and the
// approver's view show the output itself, not only its digest: off by
// default, since a check may print what should not be shown.
type Precondition struct {
	Check      string            `toml:"check" json:"check"`
	Params     map[string]string `toml:"params" json:"params,omitempty"`
	ShowOutput bool              `toml:"show_output" json:"show_output,omitempty"`
}

// PreconditionRequest is the check's invocation for a plan of op with
// target and params: the check operation's name, the same target, and the
// precondition's params expanded.
func (op *Operation) PreconditionRequest(target string, params map[string]string) (string, map[string]string) {
	out := map[string]string{}
	for k, v := range op.Precondition.Params {
		out[k] = expand(v, target, params, nil)
	}
	return op.Precondition.Check, out
}

// RequestRules are an operation's overrides of [requests]
// (docs/CONFIG.md). Durations are Go durations; "0s" turns a reminder or
// an escalation off; empty keeps the deployment's.
type RequestRules struct {
	TTL                  string `toml:"ttl" json:"ttl,omitempty"`
	RemindAfter          string `toml:"remind_after" json:"remind_after,omitempty"`
	EscalateAfter        string `toml:"escalate_after" json:"escalate_after,omitempty"`
	EscalateSlackChannel string `toml:"escalate_slack_channel" json:"escalate_slack_channel,omitempty"`
	EscalateGitHub       string `toml:"escalate_github" json:"escalate_github,omitempty"`
}

// Durations returns the rules' durations, nil where a rule is not set.
// They were checked when the operation was loaded.
func (r *RequestRules) Durations() (ttl, remindAfter, escalateAfter *time.Duration) {
	parse := func(s string) *time.Duration {
		if s == "" {
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil
		}
		return &d
	}
	return parse(r.TTL), parse(r.RemindAfter), parse(r.EscalateAfter)
}

func (r *RequestRules) check() error {
	for _, d := range []struct {
		key, v string
		min    time.Duration
	}{{"ttl", r.TTL, time.Second}, {"remind_after", r.RemindAfter, 0}, {"escalate_after", r.EscalateAfter, 0}} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v < d.min {
			return fmt.Errorf("requests.%s %q: want a Go duration of at least %s", d.key, d.v, d.min)
		}
	}
	if r.EscalateGitHub != "" && !ValidGitHubMention(r.EscalateGitHub) {
		return fmt.Errorf("requests.escalate_github %q: want @login or @org/team", r.EscalateGitHub)
	}
	if strings.ContainsAny(r.EscalateSlackChannel, " \t\n<>&") {
		return fmt.Errorf("requests.escalate_slack_channel %q: want a channel name or id", r.EscalateSlackChannel)
	}
	return nil
}

// githubMentionRE is what an escalation on GitHub may mention: one @login
// or @org/team, nothing that Markdown could make more of.
var githubMentionRE = lazyRegexp(`^@[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:/[A-Za-z0-9_.-]{1,100})?$`)

// ValidGitHubMention reports whether s is one @login or @org/team.
func ValidGitHubMention(s string) bool { return githubMentionRE().MatchString(s) }

// IsMutating reports whether the operation writes. The flag decides, never
// the name; an operation that does not say is mutating.
func (op *Operation) IsMutating() bool { return op.Mutating == nil || *op.Mutating }

// ApprovalTTL is the default lifetime of evidence for this operation.
func (op *Operation) ApprovalTTL() time.Duration {
	if op.Approval.TTL != nil {
		return op.Approval.TTL.Duration
	}
	return DefaultApprovalTTL
}

// Accepts reports whether the operation accepts an approval path.
func (op *Operation) Accepts(path string) bool { return slices.Contains(op.Approval.Paths, path) }

// DefinitionError is a problem in an operation file, with where it is.
type DefinitionError struct {
	File string
	Line int // 0 when unknown
	Msg  string
}

func (e *DefinitionError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Registry is the set of declared operations.
type Registry struct {
	ops    map[string]*Operation
	names  []string
	Digest string // sha256 over every operation's digest, in name order
	// Warnings name the files of the registry directory that look meant
	// as operation files but are not read (k8s.TOML, k8s.toml.bak,
	// k8s.tml): a file not read is an operation silently missing.
	Warnings []string
}

// Get returns the named operation.
func (r *Registry) Get(name string) (*Operation, bool) {
	op, ok := r.ops[name]
	return op, ok
}

// All returns the operations in name order.
func (r *Registry) All() []*Operation {
	out := make([]*Operation, len(r.names))
	for i, n := range r.names {
		out[i] = r.ops[n]
	}
	return out
}

// nameRule is what operation and target names look like.
const nameRule = "^[a-z][a-z0-9-]{0,62}$"

// validName checks nameRule with a loop: as a regexp, its bounded
// repetition would be compiled at every start of prod-write.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range []byte(s[1:]) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// lazyRegexp compiles expr on first use, not at package initialisation,
// which every prod-write process would pay for, loading operations or not.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

var envNameRE = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Load reads every *.toml file in dir (sorted by name) and resolves each
// operation's program against securePath. An operation whose program does
// not resolve is loaded as unavailable on this host ([LoadOn]).
func Load(dir string, securePath []string) (*Registry, error) {
	host, _ := os.Hostname()
	return LoadOn(dir, securePath, host)
}

// LoadOn is [Load] on the host named host: an operation whose program does
// not resolve on securePath is kept, marked [Operation.Unavailable] with
// the host and the program, so that one host's missing program makes that
// operation unavailable there and nothing else (docs/DISTRIBUTED.md,
// "Adding a host"). A program that is not a valid name or absolute path is
// still a [*DefinitionError]: that is wrong on every host.
func LoadOn(dir string, securePath []string, host string) (*Registry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading registry: %w", err)
	}
	var files []string
	reg := &Registry{ops: map[string]*Operation{}}
	for _, e := range entries { // sorted by name
		if strings.HasSuffix(e.Name(), ".toml") {
			files = append(files, filepath.Join(dir, e.Name()))
		} else if nearMiss(e) {
			reg.Warnings = append(reg.Warnings, fmt.Sprintf("%s is not read: only files whose names end in .toml declare operations", filepath.Join(dir, e.Name())))
		}
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading registry: %w", err)
		}
		ops, err := Parse(file, data)
		if err != nil {
			return nil, err
		}
		for _, op := range ops {
			if prev, dup := reg.ops[op.Name]; dup {
				return nil, &DefinitionError{File: file, Line: lineOf(op.Source),
					Msg: fmt.Sprintf("operation %q is already declared at %s", op.Name, prev.Source)}
			}
			path, err := ResolveProgram(op.Program, securePath)
			switch {
			case errors.Is(err, ErrProgramNotFound):
				op.Unavailable = fmt.Sprintf("operation %s is not available on host %s: %v", op.Name, host, err)
			case err != nil:
				return nil, &DefinitionError{File: file, Line: lineOf(op.Source),
					Msg: fmt.Sprintf("operation %q: %v", op.Name, err)}
			}
			op.ProgramPath = path
			reg.ops[op.Name] = op
			reg.names = append(reg.names, op.Name)
		}
	}
	if err := reg.checkPreconditions(); err != nil {
		return nil, err
	}
	reg.seal()
	return reg, nil
}

// checkPreconditions checks what a precondition needs of the operation it
// names: present, not mutating (a check that writes would be a write no one
// approved), no files and no precondition of its own, every target of the
// operation allowed, and its params exactly the ones given.
func (reg *Registry) checkPreconditions() error {
	for _, n := range reg.names {
		op := reg.ops[n]
		if op.Precondition == nil {
			continue
		}
		fail := func(format string, args ...any) error {
			return &DefinitionError{File: fileOf(op.Source), Line: lineOf(op.Source),
				Msg: fmt.Sprintf("operation %q: precondition: %s", op.Name, fmt.Sprintf(format, args...))}
		}
		c, ok := reg.ops[op.Precondition.Check]
		switch {
		case !ok:
			return fail("check %q is not an operation of the registry", op.Precondition.Check)
		case c.IsMutating():
			return fail("check %q is mutating: a precondition must be mutating = false", c.Name)
		case len(c.Files) > 0:
			return fail("check %q takes files: a precondition check cannot", c.Name)
		case c.Precondition != nil:
			return fail("check %q has a precondition of its own", c.Name)
		}
		for _, t := range op.Targets {
			if !slices.Contains(c.Targets, t) {
				return fail("check %q does not allow target %q of %s", c.Name, t, op.Name)
			}
		}
		for k := range op.Precondition.Params {
			if _, ok := c.Params[k]; !ok {
				return fail("check %q declares no param %q", c.Name, k)
			}
		}
		for k := range c.Params {
			if _, ok := op.Precondition.Params[k]; !ok {
				return fail("param %q of check %q is not given", k, c.Name)
			}
		}
	}
	return nil
}

func fileOf(source string) string {
	if i := strings.LastIndexByte(source, ':'); i >= 0 {
		return source[:i]
	}
	return source
}

// nearMiss reports whether a file Load does not read has a name that
// says TOML: another case (.TOML), another spelling (.tml), or a suffix
// after .toml (a backup, a disabled copy, an editor's file).
func nearMiss(e os.DirEntry) bool {
	lower := strings.ToLower(e.Name())
	return !e.IsDir() && (strings.Contains(lower, ".toml") || strings.Contains(lower, ".tml"))
}

func (reg *Registry) seal() {
	sort.Strings(reg.names)
	h := sha256.New()
	for _, n := range reg.names {
		fmt.Fprintf(h, "%s %s\n", n, reg.ops[n].Digest)
	}
	reg.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Decode rebuilds a registry from operations as `ops list --json` prints
// them: a runner service's client learns the registry this way. Each
// definition is checked again and its digest recomputed, so a definition
// that does not match its digest is an error.
func Decode(data []byte) (*Registry, error) {
	var ops []*Operation
	if err := json.Unmarshal(data, &ops); err != nil {
		return nil, fmt.Errorf("decoding the registry: %w", err)
	}
	reg := &Registry{ops: map[string]*Operation{}}
	for _, op := range ops {
		want, path := op.Digest, op.ProgramPath
		if err := op.check(); err != nil {
			return nil, fmt.Errorf("operation %q: %w", op.Name, err)
		}
		if op.Digest != want {
			return nil, fmt.Errorf("operation %q: its definition does not match its digest", op.Name)
		}
		if _, dup := reg.ops[op.Name]; dup {
			return nil, fmt.Errorf("operation %q twice", op.Name)
		}
		op.ProgramPath = path
		reg.ops[op.Name] = op
		reg.names = append(reg.names, op.Name)
	}
	if err := reg.checkPreconditions(); err != nil {
		return nil, err
	}
	reg.seal()
	return reg, nil
}

func lineOf(source string) int {
	i := strings.LastIndexByte(source, ':')
	n, _ := strconv.Atoi(source[i+1:])
	return n
}

// ErrProgramNotFound is wrapped by [ResolveProgram] when no candidate is
// an executable file: the program is not installed on this host.
var ErrProgramNotFound = errors.New("not found")

// ResolveProgram finds program on securePath (or checks it, when absolute)
// and returns its cleaned absolute path. The caller's PATH is never used.
func ResolveProgram(program string, securePath []string) (string, error) {
	if program == "" {
		return "", errors.New("program is empty")
	}
	var candidates []string
	if strings.ContainsRune(program, '/') {
		if !filepath.IsAbs(program) {
			return "", fmt.Errorf("program %q: a path must be absolute", program)
		}
		candidates = []string{filepath.Clean(program)}
	} else {
		for _, dir := range securePath {
			if filepath.IsAbs(dir) {
				candidates = append(candidates, filepath.Join(dir, program))
			}
		}
	}
	for _, c := range candidates {
		fi, err := os.Stat(c)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return c, nil
		}
	}
	return "", notFound(fmt.Sprintf("program %q does not resolve to an executable file on the secure path %s", program, strings.Join(securePath, ":")))
}

// notFound is [ErrProgramNotFound] with what was looked for, and where.
type notFound string

func (e notFound) Error() string        { return string(e) }
func (e notFound) Is(target error) bool { return target == ErrProgramNotFound }

type opFile struct {
	Operation []*Operation `toml:"operation"`
}

// Parse decodes one operation file. It checks everything that does not
// need the file system; [Load] also resolves programs.
func Parse(file string, data []byte) ([]*Operation, error) {
	var f opFile
	if err := tomlpos.Decode(data, &f); err != nil {
		var te *tomlpos.Error
		if !errors.As(err, &te) {
			return nil, &DefinitionError{File: file, Msg: err.Error()}
		}
		return nil, &DefinitionError{File: file, Line: te.Line, Msg: te.Msg}
	}
	starts := tableLines(data)
	if len(f.Operation) == 0 {
		return nil, &DefinitionError{File: file, Msg: "declares no [[operation]]"}
	}
	for i, op := range f.Operation {
		line := 0
		if i < len(starts) {
			line = starts[i]
		}
		op.Source = fmt.Sprintf("%s:%d", file, line)
		if err := op.check(); err != nil {
			return nil, &DefinitionError{File: file, Line: line, Msg: fmt.Sprintf("operation %q: %v", op.Name, err)}
		}
	}
	return f.Operation, nil
}

// tableLines returns the 1-based lines on which an [[operation]] table
// starts, in order.
func tableLines(data []byte) []int {
	var out []int
	for i, l := range tomlpos.CodeLines(data) {
		if operationHeaderRE().MatchString(l) {
			out = append(out, i+1)
		}
	}
	return out
}

var operationHeaderRE = lazyRegexp(`^\s*\[\[\s*(operation|"operation"|'operation')\s*\]\]`)

func (op *Operation) check() error {
	if !validName(op.Name) {
		return fmt.Errorf("name must match %s", nameRule)
	}
	if op.Program == "" {
		return errors.New("program is required")
	}
	if len(op.Targets) == 0 {
		return errors.New("targets must name at least one target")
	}
	for _, t := range op.Targets {
		if !validName(t) {
			return fmt.Errorf("target %q must match %s", t, nameRule)
		}
	}
	for name, p := range op.Params {
		if !envNameRE().MatchString(name) {
			return fmt.Errorf("param name %q must match %s", name, envNameRE())
		}
		if err := p.compile(); err != nil {
			return fmt.Errorf("param %q: %v", name, err)
		}
		op.Params[name] = p
	}
	for name, f := range op.Files {
		if !envNameRE().MatchString(name) {
			return fmt.Errorf("file name %q must match %s", name, envNameRE())
		}
		if f.MaxSize <= 0 {
			return fmt.Errorf("file %q: max_size is required", name)
		}
		if _, clash := op.Params[name]; clash {
			return fmt.Errorf("%q is both a param and a file", name)
		}
		if f.DiffAgainst != "" {
			if err := op.checkTemplate(f.DiffAgainst, false); err != nil {
				return fmt.Errorf("file %q: diff_against: %v", name, err)
			}
			if !filepath.IsAbs(f.DiffAgainst) || filepath.Clean(f.DiffAgainst) != f.DiffAgainst {
				return fmt.Errorf("file %q: diff_against %q must be an absolute, clean path", name, f.DiffAgainst)
			}
		}
	}
	for _, a := range op.Args {
		if err := op.checkTemplate(a, true); err != nil {
			return fmt.Errorf("args: %v", err)
		}
	}
	seen := map[string]string{}
	for _, group := range []struct {
		kind  string
		names []string
	}{{"pass", op.Env.Pass}, {"secret", op.Env.Secret}, {"set", mapKeys(op.Env.Set)}} {
		for _, n := range group.names {
			if !envNameRE().MatchString(n) {
				return fmt.Errorf("env %s: %q is not a variable name", group.kind, n)
			}
			if prev, dup := seen[n]; dup {
				return fmt.Errorf("env: %q is in both %s and %s", n, prev, group.kind)
			}
			seen[n] = group.kind
		}
	}
	for n, v := range op.Env.Set {
		if err := op.checkTemplate(v, false); err != nil {
			return fmt.Errorf("env set %s: %v", n, err)
		}
	}
	if pre := op.Precondition; pre != nil {
		if !validName(pre.Check) {
			return fmt.Errorf("precondition.check %q must match %s", pre.Check, nameRule)
		}
		if pre.Check == op.Name {
			return errors.New("precondition.check names the operation itself")
		}
		for k, v := range pre.Params {
			if !envNameRE().MatchString(k) {
				return fmt.Errorf("precondition.params: %q is not a param name", k)
			}
			if err := op.checkTemplate(v, false); err != nil {
				return fmt.Errorf("precondition.params.%s: %v", k, err)
			}
		}
	}
	if op.Cwd != "" && !filepath.IsAbs(op.Cwd) {
		return fmt.Errorf("cwd %q must be absolute", op.Cwd)
	}
	if op.RunAs != "" && !validAccount(op.RunAs) {
		return fmt.Errorf("run_as %q is not an account name", op.RunAs)
	}
	if op.Approval.Paths == nil {
		op.Approval.Paths = []string{PathGera, PathSmithTrinity}
	}
	if len(op.Approval.Paths) == 0 {
		return errors.New("approval.paths is empty: nothing could ever approve it")
	}
	for i, p := range op.Approval.Paths {
		if p == PathRecordApprovals {
			op.Approval.Paths[i] = PathSmithTrinity // stored spelling (ADR 0014)
			continue
		}
		if p != PathGera && p != PathSmithTrinity && p != PathBreakGlass {
			return fmt.Errorf("approval.paths: %q is not %q, %q or %q", p, PathGera, PathRecordApprovals, PathBreakGlass)
		}
	}
	if op.Accepts(PathBreakGlass) && !op.Accepts(PathGera) && !op.Accepts(PathSmithTrinity) {
		return errors.New("approval.paths: break-glass is an escape from a usual path, never the only one")
	}
	if t := op.Approval.BreakGlassTTL; t != nil {
		if !op.Accepts(PathBreakGlass) {
			return errors.New("approval.break_glass_ttl is set but approval.paths does not allow break-glass")
		}
		if t.Duration <= 0 || t.Duration > MaxBreakGlassTTL {
			return fmt.Errorf("approval.break_glass_ttl %s: want more than 0 and at most %s", t.Duration, MaxBreakGlassTTL)
		}
	}
	if op.Approval.Approvers == 0 {
		op.Approval.Approvers = 1
	}
	if op.Approval.Approvers < 1 || op.Approval.Approvers > 16 {
		return fmt.Errorf("approval.approvers %d: want 1 to 16", op.Approval.Approvers)
	}
	if op.Mutating == nil {
		t := true
		op.Mutating = &t
	}
	if op.Requests != nil {
		if err := op.Requests.check(); err != nil {
			return err
		}
	}
	d, err := op.DefinitionDigest()
	op.Digest = d
	return err
}

// DefinitionDigest computes the digest of the operation's definition: the
// sha256 of its JSON encoding (defaults applied) without where it was read
// from or where its program resolved. Replay recomputes it from the
// definition a receipt carries.
func (op *Operation) DefinitionDigest() (string, error) {
	bare := *op
	bare.Source, bare.ProgramPath, bare.Digest, bare.Unavailable = "", "", "", ""
	bare.Requests = nil // they decide nothing the gate judges
	def, err := json.Marshal(&bare)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(def)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func mapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (p *Param) compile() error {
	switch p.Type {
	case "":
		p.Type = "string"
		if p.Min != nil || p.Max != nil {
			p.Type = "integer"
		}
	case "string", "integer":
	default:
		return fmt.Errorf("type %q: want \"string\" or \"integer\"", p.Type)
	}
	if p.Type == "string" && (p.Min != nil || p.Max != nil) {
		return errors.New("min and max apply to integer params")
	}
	if p.Min != nil && p.Max != nil && *p.Min > *p.Max {
		return fmt.Errorf("min %d is above max %d", *p.Min, *p.Max)
	}
	if p.Pattern != "" {
		// Only parsed here: a registry has many operations and a run
		// validates the params of one, so each pattern is compiled when a
		// value is first checked against it (bounded repetitions such as
		// {0,30} make compiling far dearer than parsing).
		if _, err := syntax.Parse(p.anchored(), syntax.Perl); err != nil {
			return fmt.Errorf("pattern: %v", err)
		}
	}
	return nil
}

// anchored is the pattern as values must match it: whole.
func (p *Param) anchored() string { return `^(?:` + p.Pattern + `)$` }

// Validate checks a value against the param's type, pattern, enum and range.
func (p *Param) Validate(v string) error {
	if strings.IndexByte(v, 0) >= 0 {
		return errors.New("contains a NUL byte")
	}
	if p.Type == "" {
		if err := p.compile(); err != nil {
			return err
		}
	}
	if p.re == nil && p.Pattern != "" {
		re, err := regexp.Compile(p.anchored())
		if err != nil {
			return fmt.Errorf("pattern: %v", err)
		}
		p.re = re
	}
	if p.Type == "integer" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != v {
			return fmt.Errorf("%q is not a base-10 integer", v)
		}
		if p.Min != nil && n < *p.Min {
			return fmt.Errorf("%d is below the minimum %d", n, *p.Min)
		}
		if p.Max != nil && n > *p.Max {
			return fmt.Errorf("%d is above the maximum %d", n, *p.Max)
		}
	}
	if len(p.Enum) > 0 && !slices.Contains(p.Enum, v) {
		return fmt.Errorf("%q is not one of %s", v, strings.Join(p.Enum, ", "))
	}
	if p.re != nil && !p.re.MatchString(v) {
		return fmt.Errorf("%q does not match %s", v, p.Pattern)
	}
	return nil
}

var placeholderRE = lazyRegexp(`\{(target|param\.[A-Za-z0-9_]+|file\.[A-Za-z0-9_]+)\}`)

// loosePlaceholderRE finds anything that looks meant as a placeholder, so
// that a near miss ({param.my-svc}, { param.x }, {Param.x}) is an error
// instead of literal text reaching the program.
var loosePlaceholderRE = lazyRegexp(`\{\s*(?i:param|file|target)\b[^{}]*\}`)

func (op *Operation) checkTemplate(t string, filesAllowed bool) error {
	for _, m := range loosePlaceholderRE().FindAllString(t, -1) {
		if !placeholderRE().MatchString(m) || placeholderRE().FindString(m) != m {
			return fmt.Errorf("%s is not a placeholder: write {target}, {param.NAME} or {file.NAME} with NAME of letters, digits and _", m)
		}
	}
	for _, m := range placeholderRE().FindAllStringSubmatch(t, -1) {
		kind, name, _ := strings.Cut(m[1], ".")
		switch kind {
		case "param":
			if _, ok := op.Params[name]; !ok {
				return fmt.Errorf("%s names no declared param", m[0])
			}
		case "file":
			if !filesAllowed {
				return fmt.Errorf("%s: files cannot appear here", m[0])
			}
			if _, ok := op.Files[name]; !ok {
				return fmt.Errorf("%s names no declared file", m[0])
			}
		}
	}
	return nil
}

// expand replaces the placeholders of t. fileArg maps a file name to what
// stands in its place.
func expand(t, target string, params map[string]string, fileArg func(string) string) string {
	return placeholderRE().ReplaceAllStringFunc(t, func(m string) string {
		kind, name, _ := strings.Cut(m[1:len(m)-1], ".")
		switch kind {
		case "target":
			return target
		case "param":
			return params[name]
		default:
			return fileArg(name)
		}
	})
}

// DiffPath is the path file's diff_against names for target and params,
// or "" when it names none. It refuses an expansion that is not an
// absolute, clean path (a param value with "..", a slash where the
// template had none, a NUL byte): the caller picks values, never the path.
func (op *Operation) DiffPath(file, target string, params map[string]string) (string, error) {
	f, ok := op.Files[file]
	if !ok || f.DiffAgainst == "" {
		return "", nil
	}
	p := expand(f.DiffAgainst, target, params, func(string) string { return "" })
	if strings.IndexByte(p, 0) >= 0 || !filepath.IsAbs(p) || filepath.Clean(p) != p ||
		strings.Count(p, "/") != strings.Count(f.DiffAgainst, "/") {
		return "", fmt.Errorf("diff_against of file %s expands to %q, not a path the operation names", file, p)
	}
	return p, nil
}

// Argv expands the operation's args for target and params, with fileArg
// standing in for each file placeholder; argv[0] is the resolved program.
func (op *Operation) Argv(target string, params map[string]string, fileArg func(string) string) []string {
	argv := []string{op.ProgramPath}
	for _, a := range op.Args {
		argv = append(argv, expand(a, target, params, fileArg))
	}
	return argv
}

// validAccount reports whether name is a portable account name (what
// useradd accepts by default): a lower-case letter or underscore, then up to
// 31 of lower-case letters, digits, underscores and dashes.
func validAccount(name string) bool {
	if len(name) == 0 || len(name) > 32 {
		return false
	}
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '-'):
		default:
			return false
		}
	}
	return true
}
