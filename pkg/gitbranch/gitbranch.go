// Package gitbranch reads a git branch's first-parent history: the
// commits that landed on it, oldest first, and the files each holds. It is
// what replay judges receipts by when the trust policy and registry live
// in a git work tree (docs/adr/0059-the-protected-branch-is-the-history.md).
//
// It reads the repository's files with go-git and runs no program: no
// `git`, no hook, no configured filter or fsmonitor, no replace ref or
// graft, nothing of the environment (GIT_DIR and the like). What it
// reports is what the object store says the branch holds.
package gitbranch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
)

// ErrShallow is returned for a shallow clone: its first-parent chain stops
// at the clone's depth, so it cannot say when a version came into force.
var ErrShallow = errors.New("the repository is a shallow clone")

// MaxFile bounds a file read from the history (a trust policy, an
// operation file, a freeze calendar).
const MaxFile = 4 << 20

// Repo is a git repository with a work tree.
type Repo struct {
	root string // the work tree, absolute and symlink-free
	st   *filesystem.Storage
}

// Find returns the repository whose work tree holds path, looking for
// `.git` in path's directory and each parent, or nil when there is none.
func Find(p string) (*Repo, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	dir := filepath.Dir(abs)
	for {
		gitPath := filepath.Join(dir, ".git")
		fi, err := os.Lstat(gitPath)
		switch {
		case err == nil && fi.IsDir():
			return &Repo{root: dir, st: filesystem.NewStorage(osfs.New(gitPath), cache.NewObjectLRUDefault())}, nil
		case err == nil && fi.Mode().IsRegular():
			st, err := linkedStorage(dir, gitPath)
			if err != nil {
				return nil, err
			}
			return &Repo{root: dir, st: st}, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("looking for a git repository: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, nil
		}
		dir = parent
	}
}

// linkedStorage opens the repository a `.git` file points to ("gitdir:
// …"): a linked work tree or a submodule, with its common directory when
// it has one.
func linkedStorage(root, gitFile string) (*filesystem.Storage, error) {
	b, err := os.ReadFile(gitFile)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", gitFile, err)
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok {
		return nil, fmt.Errorf("%s is not a gitdir link", gitFile)
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	var fsys = osfs.New(dir)
	if c, err := os.ReadFile(filepath.Join(dir, "commondir")); err == nil {
		common := strings.TrimSpace(string(c))
		if !filepath.IsAbs(common) {
			common = filepath.Join(dir, common)
		}
		return filesystem.NewStorage(dotgit.NewRepositoryFilesystem(fsys, osfs.New(common)), cache.NewObjectLRUDefault()), nil
	}
	return filesystem.NewStorage(fsys, cache.NewObjectLRUDefault()), nil
}

// Root is the work tree's directory.
func (r *Repo) Root() string { return r.root }

// Rel is p relative to the work tree, slash-separated, or an error when p
// is outside it.
func (r *Repo) Rel(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	rel, err := filepath.Rel(r.root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s is outside the git work tree %s", p, r.root)
	}
	return filepath.ToSlash(rel), nil
}

// Head is the commit HEAD names: the branch checked out.
func (r *Repo) Head() (plumbing.Hash, error) {
	ref, err := storer.ResolveReference(r.st, plumbing.HEAD)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("reading HEAD of %s: %w", r.root, err)
	}
	return ref.Hash(), nil
}

// Tracks reports whether the commit HEAD names holds a regular file at
// rel. A repository with no commit yet tracks nothing.
func (r *Repo) Tracks(rel string) (bool, error) {
	h, err := r.Head()
	if err != nil {
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			return false, nil
		}
		return false, err
	}
	c, err := object.GetCommit(r.st, h)
	if err != nil {
		return false, fmt.Errorf("reading commit %s of %s: %w", h, r.root, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return false, fmt.Errorf("reading the tree of commit %s: %w", h, err)
	}
	e, err := tree.FindEntry(rel)
	return err == nil && regular(e.Mode), nil
}

func regular(m filemode.FileMode) bool { return m == filemode.Regular || m == filemode.Executable }

// Commit is one commit of the first-parent chain.
type Commit struct {
	Hash string
	// When is the commit's committer time, or the latest of an earlier
	// commit's on the chain when that is later: a commit landed no
	// earlier than its first parent.
	When time.Time
	tree *object.Tree
}

// FirstParents returns HEAD's first-parent chain, oldest first. A shallow
// clone is ErrShallow: its chain stops at the clone's depth.
func (r *Repo) FirstParents() ([]*Commit, error) {
	shallow, err := r.st.Shallow()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.root, err)
	}
	if len(shallow) > 0 {
		return nil, ErrShallow
	}
	h, err := r.Head()
	if err != nil {
		return nil, err
	}
	var chain []*object.Commit
	for {
		c, err := object.GetCommit(r.st, h)
		if err != nil {
			return nil, fmt.Errorf("reading commit %s of %s: %w", h, r.root, err)
		}
		chain = append(chain, c)
		if len(c.ParentHashes) == 0 {
			break
		}
		h = c.ParentHashes[0]
	}
	out := make([]*Commit, 0, len(chain))
	var last time.Time
	for i := len(chain) - 1; i >= 0; i-- {
		c := chain[i]
		tree, err := c.Tree()
		if err != nil {
			return nil, fmt.Errorf("reading the tree of commit %s: %w", c.Hash, err)
		}
		when := c.Committer.When.UTC()
		if when.Before(last) {
			when = last
		}
		last = when
		out = append(out, &Commit{Hash: c.Hash.String(), When: when, tree: tree})
	}
	return out, nil
}

// ID is the object id of what the commit holds at p (a file or a
// directory), or "" when it holds nothing there. Two commits with the same
// id at p hold the same content there.
func (c *Commit) ID(p string) string {
	if p == "" || p == "." {
		return c.tree.Hash.String()
	}
	e, err := c.tree.FindEntry(p)
	if err != nil {
		return ""
	}
	return e.Hash.String()
}

// ReadFile is the content of the regular file at p, fs.ErrNotExist when
// the commit holds none there.
func (c *Commit) ReadFile(p string) ([]byte, error) {
	p = path.Clean(p)
	e, err := c.tree.FindEntry(p)
	if err != nil {
		return nil, fmt.Errorf("%s at %.12s: %w", p, c.Hash, fs.ErrNotExist)
	}
	if !regular(e.Mode) {
		return nil, fmt.Errorf("%s at %.12s is not a regular file", p, c.Hash)
	}
	f, err := c.tree.TreeEntryFile(e)
	if err != nil {
		return nil, fmt.Errorf("reading %s at %.12s: %w", p, c.Hash, err)
	}
	if f.Size > MaxFile {
		return nil, fmt.Errorf("%s at %.12s is larger than %d bytes", p, c.Hash, MaxFile)
	}
	rd, err := f.Reader()
	if err != nil {
		return nil, fmt.Errorf("reading %s at %.12s: %w", p, c.Hash, err)
	}
	defer rd.Close()
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(rd, MaxFile+1)); err != nil {
		return nil, fmt.Errorf("reading %s at %.12s: %w", p, c.Hash, err)
	}
	return b.Bytes(), nil
}

// ReadDir lists the names of the regular files directly in directory p,
// sorted; fs.ErrNotExist when the commit holds no directory there.
func (c *Commit) ReadDir(p string) ([]string, error) {
	t := c.tree
	if p != "" && p != "." {
		var err error
		if t, err = c.tree.Tree(path.Clean(p)); err != nil {
			return nil, fmt.Errorf("%s at %.12s: %w", p, c.Hash, fs.ErrNotExist)
		}
	}
	var names []string
	for _, e := range t.Entries {
		if regular(e.Mode) {
			names = append(names, e.Name)
		}
	}
	return names, nil
}
