package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/store"
)

// Post is where one decision was posted: a Slack message, a GitHub issue,
// or a comment on a pull request.
type Post struct {
	Kind        string    `json:"kind"`
	Fingerprint string    `json:"fingerprint"`
	Record      string    `json:"record"`
	Posted      time.Time `json:"posted"`
	URL         string    `json:"url,omitempty"`

	SlackChannel string `json:"slack_channel,omitempty"`
	SlackTS      string `json:"slack_ts,omitempty"`

	GitHubRepo string `json:"github_repo,omitempty"` // owner/name
	// GitHubIssue is the issue, or the pull request, the decision is on.
	GitHubIssue int  `json:"github_issue,omitempty"`
	GitHubPR    bool `json:"github_pr,omitempty"`
	// GitHubComment is the decision comment on a pull request: commands
	// after it answer it.
	GitHubComment int64 `json:"github_comment_id,omitempty"`

	// Escalation marks a post made when nobody answered in time
	// ([FollowUps]).
	Escalation bool `json:"escalation,omitempty"`
}

// Where names the post's place in one word, for events and logs.
func (p Post) Where() string {
	switch p.Kind {
	case KindSlack:
		return fmt.Sprintf("slack %s/%s", p.SlackChannel, p.SlackTS)
	case KindGitHub:
		return fmt.Sprintf("github %s#%d", p.GitHubRepo, p.GitHubIssue)
	}
	return p.Kind
}

// key identifies the post's place, independent of when it was made.
func (p Post) key() string {
	return fmt.Sprintf("%s|%s|%s|%s|%s|%d|%d", p.Kind, p.Record, p.SlackChannel, p.SlackTS, strings.ToLower(p.GitHubRepo), p.GitHubIssue, p.GitHubComment)
}

// Ledger remembers where decisions were posted, so that a withdrawal (run
// by the planner, in another process) can close them and the GitHub poller
// knows which issues to read. It lives in the state directory next to the
// store, one file per post, each written atomically:
//
//	DIR/HEX/KIND-ID.json
//
// The ledger is not trusted for anything the gate decides: it only says
// where to look. An answer found through it is judged like any other.
type Ledger struct {
	Dir string
}

// Add records p durably.
func (l *Ledger) Add(p Post) error {
	if err := store.CheckFingerprint(p.Fingerprint); err != nil {
		return err
	}
	dir := filepath.Join(l.Dir, strings.TrimPrefix(p.Fingerprint, "sha256:"))
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("recording post: %w", err)
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(p.key()))
	path := filepath.Join(dir, p.Kind+"-"+hex.EncodeToString(sum[:12])+".json")
	// Atomic replace: the name is a function of the post's place, so a
	// second write of one post rewrites the same file.
	return durable.WriteFile(path, append(data, '\n'), 0o600)
}

// Posts returns the posts of plan fp, oldest first.
func (l *Ledger) Posts(fp string) ([]Post, error) {
	if err := store.CheckFingerprint(fp); err != nil {
		return nil, err
	}
	return l.read(filepath.Join(l.Dir, strings.TrimPrefix(fp, "sha256:")))
}

// All returns every post, oldest first.
func (l *Ledger) All() ([]Post, error) {
	entries, err := os.ReadDir(l.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Post
	for _, e := range entries {
		if !e.IsDir() || store.CheckFingerprint("sha256:"+e.Name()) != nil {
			continue
		}
		ps, err := l.read(filepath.Join(l.Dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	sortPosts(out)
	return out, nil
}

func (l *Ledger) read(dir string) ([]Post, error) {
	out, err := readJSONDir(dir, func(p Post) bool {
		return filepath.Base(dir) == strings.TrimPrefix(p.Fingerprint, "sha256:") // else misfiled: not this plan's
	})
	if err != nil {
		return nil, err
	}
	sortPosts(out)
	return out, nil
}

// readJSONDir decodes each regular *.json file of dir (none when dir does
// not exist), keeping those keep accepts.
func readJSONDir[T any](dir string, keep func(T) bool) ([]T, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []T
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
		}
		if keep(v) {
			out = append(out, v)
		}
	}
	return out, nil
}

func sortPosts(ps []Post) {
	sort.SliceStable(ps, func(i, j int) bool {
		if !ps[i].Posted.Equal(ps[j].Posted) {
			return ps[i].Posted.Before(ps[j].Posted)
		}
		return ps[i].GitHubComment < ps[j].GitHubComment
	})
}
