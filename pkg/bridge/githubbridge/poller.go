package githubbridge

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/google/go-github/v66/github"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// Poller reads decision comments and records the answers that count.
type Poller struct {
	Client      *github.Client
	Owner, Repo string
	Attestor    *bridge.Attestor
	Ledger      *bridge.Ledger
	Log         *slog.Logger
	// Token is used only to scrub errors before they are logged.
	Token bridge.Secret

	// settled holds comments already recorded or refused for good, so
	// each is judged and logged once per process; the store's dedupe
	// covers restarts.
	settled map[int64]bool
}

// Counts is what one poll did.
type Counts struct {
	Recorded, Duplicates, Refused, Ignored int
}

// Run polls every interval until ctx is done.
func (p *Poller) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := p.PollOnce(ctx); err != nil && ctx.Err() == nil {
			p.Log.Warn("github: poll failed", "error", bridge.Redact(err.Error(), p.Token))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PollOnce reads the comments of every open decision in the repository and
// records the answers among them.
func (p *Poller) PollOnce(ctx context.Context) (Counts, error) {
	var n Counts
	if p.settled == nil {
		p.settled = map[int64]bool{}
	}
	posts, err := p.Ledger.All()
	if err != nil {
		return n, err
	}
	repo := p.Owner + "/" + p.Repo
	byIssue := map[int][]bridge.Post{}
	for _, post := range posts {
		if post.Kind == bridge.KindGitHub && strings.EqualFold(post.GitHubRepo, repo) && post.GitHubIssue > 0 {
			byIssue[post.GitHubIssue] = append(byIssue[post.GitHubIssue], post)
		}
	}
	issues := make([]int, 0, len(byIssue))
	for is := range byIssue {
		issues = append(issues, is)
	}
	sort.Ints(issues)
	var firstErr error
	for _, is := range issues {
		if !p.open(byIssue[is]) {
			continue
		}
		if err := p.pollIssue(ctx, is, byIssue[is], &n); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return n, firstErr
}

// open reports whether any decision among posts can still take an answer.
func (p *Poller) open(posts []bridge.Post) bool {
	for _, post := range posts {
		v, err := bridge.Describe(p.Attestor.Source, post.Fingerprint, post.Record, p.Attestor.Now())
		if err == nil && !v.Closed() {
			return true
		}
	}
	return false
}

func (p *Poller) pollIssue(ctx context.Context, number int, posts []bridge.Post, n *Counts) error {
	comments, err := p.comments(ctx, number)
	if err != nil {
		return err
	}
	for _, c := range comments {
		id := c.GetID()
		if id == 0 || p.settled[id] {
			continue
		}
		verdict, fp, reason, ok := ParseCommand(c.GetBody())
		if !ok {
			continue
		}
		login := c.GetUser().GetLogin()
		log := p.Log.With("issue", number, "comment", id, "login", login)
		if edited(c) {
			log.Info("github: edited comment does not count")
			p.settled[id], n.Ignored = true, n.Ignored+1
			continue
		}
		post, ok := pick(posts, fp, id)
		if !ok {
			log.Info("github: comment names a fingerprint with no decision here", "fingerprint", fp)
			p.settled[id], n.Ignored = true, n.Ignored+1
			continue
		}
		res, err := p.Attestor.Answer(bridge.Request{
			Fingerprint: fp, Record: post.Record, Verdict: verdict, Reason: reason,
			Channel: approval.Channel{Kind: bridge.KindGitHub, GitHubLogin: login, GitHubComment: id, GitHubRepo: p.Owner + "/" + p.Repo},
			Issued:  c.GetCreatedAt().Time,
		})
		if r, ok := refusal.As(err); ok {
			log.Info("github: answer not recorded", "fingerprint", fp, "code", r.Code, "reason", r.Reason)
			p.settled[id], n.Refused = true, n.Refused+1
			continue
		}
		if err != nil {
			return fmt.Errorf("recording comment %d: %w", id, err)
		}
		p.settled[id] = true
		if res.Duplicate {
			n.Duplicates++
			continue
		}
		n.Recorded++
		log.Info("github: answer recorded", "fingerprint", fp, "answer", res.ID, "approver", res.Approver, "verdict", res.Verdict)
		p.acknowledge(ctx, number, login, id, res)
	}
	return nil
}

// pick finds the decision a command answers: on an issue, the issue's
// decision for that fingerprint; on a pull request, the newest decision
// comment for it that precedes the command.
func pick(posts []bridge.Post, fp string, commentID int64) (bridge.Post, bool) {
	// posts are oldest first (the ledger's order): keep the last that fits.
	var best bridge.Post
	found := false
	for _, post := range posts {
		if post.Fingerprint != fp || (post.GitHubPR && post.GitHubComment >= commentID) {
			continue
		}
		if !found || !post.GitHubPR || post.GitHubComment > best.GitHubComment {
			best, found = post, true
		}
	}
	return best, found
}

// acknowledge answers a recorded command with a comment showing the
// decision's state.
func (p *Poller) acknowledge(ctx context.Context, number int, login string, id int64, res *bridge.Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "Recorded: **%s** by %s (@%s, comment %d), answer `%s`.\n\n", res.Verdict, res.Approver, login, id, res.ID)
	fence(&b, bridge.StatusLines(res.View))
	if _, _, err := p.Client.Issues.CreateComment(ctx, p.Owner, p.Repo, number, &github.IssueComment{Body: github.String(b.String())}); err != nil {
		p.Log.Warn("github: acknowledging comment failed", "issue", number, "error", bridge.Redact(err.Error(), p.Token))
	}
}

// comments lists every comment of an issue, following pagination.
func (p *Poller) comments(ctx context.Context, number int) ([]*github.IssueComment, error) {
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	var all []*github.IssueComment
	for page := 0; page < 1000; page++ {
		cs, resp, err := p.Client.Issues.ListComments(ctx, p.Owner, p.Repo, number, opts)
		if err != nil {
			return nil, fmt.Errorf("listing comments of #%d: %w", number, err)
		}
		all = append(all, cs...)
		if resp == nil || resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].GetID() < all[j].GetID() })
	return all, nil
}
