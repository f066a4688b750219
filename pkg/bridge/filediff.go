package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/prod-write/prod-write/operations"
)

// DiffRules say which files a bridge may show approvers a diff of
// (docs/BRIDGES.md, "What approvers see"; ADR 0027). A diff shows bytes of
// two files to everyone who can read the Slack channel or the GitHub
// repository, so each side is read only when all of these hold:
//
//   - the operation's file parameter names, with diff_against, the file it
//     replaces (the path is the operation's: a caller picks only the target
//     and params it is expanded with, [operations.Operation.DiffPath]);
//   - that path, symbolic links resolved, lies under one of Roots, the
//     directories the deployment declares (bridge.diff_roots; none, and no
//     diff is ever read);
//   - each side is a regular file readable by every account on the host
//     (mode o+r): a key or a credentials file (0600, 0640) is never shown,
//     even under a root;
//   - the new side is exactly the bytes the plan binds: the file at the
//     plan's path, read as the process that posts (the filer's `file` in
//     local mode, the runner service or `bridge serve` otherwise), is shown
//     only when its size and sha256 are the plan's, so a diff can never
//     show a file the planner did not already hash and sign.
//
// Anything else shows a line saying why no diff is shown, never the bytes.
type DiffRules struct {
	Roots []string
}

// FileDiff is what one file parameter changes.
type FileDiff struct {
	// File is the parameter's name; Against the path it replaces.
	File    string
	Against string
	// Created says the path does not exist yet: the diff is from nothing.
	Created bool
	Hunks   []string
	// Cut says the hunks were cut to the size caps.
	Cut bool
	// NotShown says why no diff is shown, or "".
	NotShown string
}

// Diffs are the diffs of the plan's file parameters that declare
// diff_against, in the plan's order.
func (r *DiffRules) Diffs(p *operations.Plan, op *operations.Operation) []FileDiff {
	var out []FileDiff
	for _, f := range p.Files {
		path, err := op.DiffPath(f.Name, p.Target, p.Params)
		if path == "" && err == nil {
			continue
		}
		d := FileDiff{File: f.Name, Against: path}
		if err != nil {
			d.NotShown = err.Error()
			out = append(out, d)
			continue
		}
		old, created, err := r.readCurrent(path)
		if err == nil {
			var cur []byte
			if cur, err = readBound(f); err == nil {
				d.Created = created
				d.Hunks, d.Cut, err = UnifiedDiff(old, cur)
			}
		}
		if err != nil {
			d.NotShown = err.Error()
			d.Hunks, d.Cut = nil, false
		}
		out = append(out, d)
	}
	return out
}

// errNotShared is why a file not every account can read is not shown.
var errNotShared = errors.New("not readable by every account on this host, so it may hold secrets")

// readCurrent reads the file at path, the current side, under the rules.
// A path that does not exist (yet) under a root is the empty file.
func (r *DiffRules) readCurrent(path string) (data []byte, created bool, err error) {
	if len(r.Roots) == 0 {
		return nil, false, errors.New("bridge.diff_roots names no directory a diff may be read from")
	}
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Not there yet: its directory must still be under a root.
		dir, derr := filepath.EvalSymlinks(filepath.Dir(path))
		if derr != nil {
			return nil, false, fmt.Errorf("%s cannot be read: %w", path, derr)
		}
		real, created = filepath.Join(dir, filepath.Base(path)), true
	} else if err != nil {
		return nil, false, fmt.Errorf("%s cannot be read: %w", path, err)
	}
	if !r.under(real) {
		return nil, false, fmt.Errorf("%s is outside bridge.diff_roots", path)
	}
	if created {
		return nil, true, nil
	}
	// O_NOFOLLOW: the resolved path was checked, so a link swapped in
	// since is refused, not followed.
	data, err = readShared(real, syscall.O_NOFOLLOW)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return data, false, nil
}

// under reports whether the resolved path p is a root or below one.
func (r *DiffRules) under(p string) bool {
	for _, root := range r.Roots {
		real, err := filepath.EvalSymlinks(root)
		if err != nil || !filepath.IsAbs(real) {
			continue
		}
		if p == real || strings.HasPrefix(p, strings.TrimSuffix(real, "/")+"/") {
			return true
		}
	}
	return false
}

// readBound reads the plan's file f, checking it is the bound bytes.
func readBound(f operations.File) ([]byte, error) {
	if f.Size > DiffMaxInput {
		return nil, fmt.Errorf("the new file is larger than %d bytes", DiffMaxInput)
	}
	data, err := readShared(f.Path, 0)
	if err != nil {
		return nil, fmt.Errorf("the new file %s: %w", f.Path, err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != f.Size || "sha256:"+hex.EncodeToString(sum[:]) != f.SHA256 {
		return nil, fmt.Errorf("the new file %s is no longer the one the plan binds", f.Path)
	}
	return data, nil
}

// readShared reads a regular file every account may read, at most
// DiffMaxInput bytes (more is an error).
func readShared(path string, flags int) ([]byte, error) {
	// Check before opening (a FIFO blocks, a device may act), then check
	// what was opened.
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|flags, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Mode().Perm()&0o004 == 0:
		return nil, errNotShared
	case fi.Size() > DiffMaxInput:
		return nil, fmt.Errorf("larger than %d bytes", DiffMaxInput)
	}
	data, err := io.ReadAll(io.LimitReader(fh, DiffMaxInput+1))
	if err != nil {
		return nil, err
	}
	if len(data) > DiffMaxInput {
		return nil, fmt.Errorf("larger than %d bytes", DiffMaxInput)
	}
	return data, nil
}
