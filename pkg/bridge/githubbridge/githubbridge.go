// Package githubbridge is Trinity's bridge on GitHub (docs/DESIGN.md §11): `file`
// opens a decision issue (or comments on a pull request), and the bridge
// reads `/approve FINGERPRINT` and `/deny FINGERPRINT` comments (and, on a
// pull request, reviews), which the [bridge.Attestor] turns into signed
// answers when their author's numeric user id maps to an approver whose
// login agrees.
//
// Answers reach the bridge two ways: GitHub's webhooks ([Webhook], the
// real-time path) and polling ([Poller], the fallback), which sends
// conditional requests (a 304 costs no rate limit) for comments updated
// since the last it saw and for a decision pull request's reviews, and
// asks GraphQL whether a review was edited (the REST API does not say)
// before it judges the review. Both judge a command the same way, and the
// [Limiter] keeps every request inside GitHub's rate limits.
//
// A comment counts only when its first line is the command and the plan's
// full fingerprint (a prefix, another plan's fingerprint or a different
// case never counts; see [ParseCommand] for white space), and it was never
// edited: GitHub lets repository admins edit anyone's comment, so an edited
// comment is not proof of what its author wrote. The answer is dated by the
// comment and names its id, so reading it again signs the same record.
package githubbridge

import (
	"time"

	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/google/go-github/v66/github"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/visible"
)

// NewClient returns a go-github client for the API at api ("" is
// api.github.com; GitHub Enterprise Server is https://HOST/api/v3/) that
// authenticates with token. Its requests go through a [Limiter]: hc's own
// when its Transport is one, else a new one around hc's Transport.
func NewClient(api string, token bridge.Secret, hc *http.Client) (*github.Client, error) {
	if hc == nil {
		hc = &http.Client{}
	}
	if _, ok := hc.Transport.(*Limiter); !ok {
		lc := *hc
		lc.Transport = &Limiter{Base: hc.Transport}
		hc = &lc
	}
	c := github.NewClient(hc)
	if !token.Empty() {
		c = c.WithAuthToken(token.Reveal())
	}
	if api != "" {
		if !strings.HasSuffix(api, "/") {
			api += "/"
		}
		u, err := url.Parse(api)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("bridge.github_api %q is not an http(s) URL", api)
		}
		c.BaseURL = u
	}
	return c, nil
}

// SplitRepo splits "owner/name".
func SplitRepo(repo string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("bridge.github_repo %q: want owner/name", repo)
	}
	return owner, name, nil
}

// commandRE is a command with no reason: the verb, one space, a whole
// fingerprint. Compiled on first use, not at every start.
var commandRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^/(approve|deny) (sha256:[0-9a-f]{64})$`) })

// ParseCommand reads a comment's or a review's body. Its first line is the
// command, alone on its line:
//
//	/approve sha256:<64 hex digits>
//	/deny sha256:<64 hex digits> [reason]
//
// The rule for white space (docs/BRIDGES.md): spaces and tabs before and
// after the command are ignored, as is the carriage return of a CRLF line
// end; the verb and the fingerprint are separated by exactly one space; a
// deny's reason follows the fingerprint after spaces or tabs; nothing else
// may share an approval's line. Any other character around the command (a
// non-breaking or other Unicode space, a zero-width character, a quote
// mark) and any other case make the line not a command. The lines after
// the first are the reason (after a deny's own).
func ParseCommand(body string) (verdict, fp, reason string, ok bool) {
	first, rest, _ := strings.Cut(body, "\n")
	line := strings.Trim(strings.TrimSuffix(first, "\r"), " \t")
	verdict, fp, sameLine, ok := parseLine(line)
	if !ok {
		return "", "", "", false
	}
	// Invalid UTF-8 is replaced whatever the length, not only where the
	// cut below counts runes, so a long reason and a short one read alike.
	reason = strings.TrimSpace(strings.ToValidUTF8(sameLine+"\n"+rest, "\uFFFD"))
	if r := []rune(reason); len(r) > 500 {
		reason = string(r[:500]) + "…"
	}
	return verdict, fp, reason, true
}

// parseLine matches a command line already trimmed of spaces and tabs.
func parseLine(line string) (verdict, fp, reason string, ok bool) {
	// A deny's reason follows its fingerprint after a space or tab: split
	// it off, so the pattern stays anchored at both ends.
	const denyLen = len("/deny sha256:") + 64
	head, tail := line, ""
	if strings.HasPrefix(line, "/deny ") && len(line) > denyLen {
		head, tail = line[:denyLen], line[denyLen:]
		if tail[0] != ' ' && tail[0] != '\t' {
			return "", "", "", false
		}
	}
	m := commandRE().FindStringSubmatch(head)
	if m == nil {
		return "", "", "", false
	}
	return m[1], m[2], strings.Trim(tail, " \t"), true
}

// edited reports whether a comment was changed after it was made, or
// cannot be shown not to have been.
func edited(c *github.IssueComment) bool {
	return c.CreatedAt == nil || c.UpdatedAt == nil || !c.CreatedAt.Time.Equal(c.UpdatedAt.Time)
}

// fence puts untrusted text in a code block whose fence is longer than any
// run of backticks inside, so nothing in it is read as Markdown, a mention
// or a link.
func fence(b *strings.Builder, lines []string) {
	text := strings.Join(lines, "\n")
	if r := []rune(text); len(r) > 20000 {
		text = string(r[:20000]) + "\n… (truncated: see prod-write status)"
	}
	n, run := 3, 0
	for _, c := range text {
		if c == '`' {
			run++
			if run >= n {
				n = run + 1
			}
		} else {
			run = 0
		}
	}
	f := strings.Repeat("`", n)
	fmt.Fprintf(b, "%stext\n%s\n%s\n\n", f, text, f)
}

// inline is a file parameter's name in a heading: names match
// ^[A-Za-z_][A-Za-z0-9_]*$ (the registry checks), so only _ could be
// Markdown; it is escaped anyway.
func inline(name string) string { return strings.ReplaceAll(visible.Text(name), "_", `\_`) }

// Title is the decision issue's title.
func Title(v *bridge.View) string {
	return fmt.Sprintf("prod-write: approve %s on %s? (%.19s…)", visible.Text(v.Plan.Operation), visible.Word(v.Plan.Target), v.Plan.Fingerprint)
}

// Body is the decision, in Markdown.
func Body(v *bridge.View) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", bridge.Title(v))
	b.WriteString("To answer, comment one line, exactly (with the whole fingerprint):\n\n")
	fence(&b, []string{"/approve " + v.Plan.Fingerprint, "/deny " + v.Plan.Fingerprint})
	b.WriteString("### Plan\n\n")
	fence(&b, bridge.PlanLines(v.Plan))
	b.WriteString("### Certainty record\n\n")
	fence(&b, bridge.RecordLines(v))
	for _, d := range v.Diffs {
		fmt.Fprintf(&b, "### What file %s changes\n\n", inline(d.File))
		fence(&b, bridge.DiffLines(d))
	}
	b.WriteString("### What an approval allows\n\n")
	fence(&b, bridge.UseLines(v))
	b.WriteString("### Status\n\n")
	fence(&b, bridge.StatusLines(v))
	for _, l := range bridge.PageLines(v) {
		b.WriteString(l + "\n\n")
	}
	fmt.Fprintf(&b, "Only comments by GitHub accounts mapped to an approver in the trust policy (by numeric user id, "+
		"with the login it names) count. The planner (%s) and the filer may deny, never approve. An edited comment never counts. "+
		"On a decision pull request, a review (Approve or Request changes) whose first line is the matching command "+
		"counts too, unless it was edited. An approval lives %s from its comment.\n\n%s\n", v.Plan.Planner, bridge.Duration(approval.DefaultAnswerTTL), bridge.VetoRule)
	return b.String()
}

// Poster opens decision issues in one repository, or comments on one pull
// request.
type Poster struct {
	Client      *github.Client
	Owner, Repo string
	// PR, when not 0, is the pull request decisions are commented on
	// instead of opening an issue each.
	PR int
}

var _ bridge.Poster = (*Poster)(nil)

// Kind implements [bridge.Poster].
func (p *Poster) Kind() string { return bridge.KindGitHub }

// Post implements [bridge.Poster].
func (p *Poster) Post(ctx context.Context, v *bridge.View) (bridge.Post, error) {
	post := bridge.Post{Kind: bridge.KindGitHub, Fingerprint: v.Plan.Fingerprint, Record: v.RecordID, Posted: v.Now,
		GitHubRepo: p.Owner + "/" + p.Repo}
	if p.PR != 0 {
		c, _, err := p.Client.Issues.CreateComment(ctx, p.Owner, p.Repo, p.PR, &github.IssueComment{Body: github.String(Body(v))})
		if err != nil {
			return bridge.Post{}, fmt.Errorf("commenting on pull request %d: %w", p.PR, err)
		}
		post.GitHubIssue, post.GitHubPR, post.GitHubComment, post.URL = p.PR, true, c.GetID(), c.GetHTMLURL()
		return post, nil
	}
	is, _, err := p.Client.Issues.Create(ctx, p.Owner, p.Repo, &github.IssueRequest{Title: github.String(Title(v)), Body: github.String(Body(v))})
	if err != nil {
		return bridge.Post{}, fmt.Errorf("opening a decision issue: %w", err)
	}
	post.GitHubIssue, post.URL = is.GetNumber(), is.GetHTMLURL()
	return post, nil
}

// Withdrawn implements [bridge.Poster]: a comment saying so, and a decision
// issue is closed as not planned. A pull request is left open: it is not
// the bridge's.
func (p *Poster) Withdrawn(ctx context.Context, post bridge.Post, v *bridge.View) error {
	var b strings.Builder
	fmt.Fprintf(&b, "**Withdrawn** by the planner (%s): this plan can never run, and answers to it no longer count.\n\n", v.Plan.Planner)
	fence(&b, []string{"Fingerprint: " + v.Plan.Fingerprint, "Record:      " + post.Record})
	if _, _, err := p.Client.Issues.CreateComment(ctx, p.Owner, p.Repo, post.GitHubIssue, &github.IssueComment{Body: github.String(b.String())}); err != nil {
		return fmt.Errorf("commenting on #%d: %w", post.GitHubIssue, err)
	}
	if post.GitHubPR {
		return nil
	}
	req := &github.IssueRequest{State: github.String("closed"), StateReason: github.String("not_planned")}
	if _, _, err := p.Client.Issues.Edit(ctx, p.Owner, p.Repo, post.GitHubIssue, req); err != nil {
		return fmt.Errorf("closing #%d: %w", post.GitHubIssue, err)
	}
	return nil
}

var _ bridge.Follower = (*Poster)(nil)

// FollowUp implements [bridge.Follower]: a comment on the decision issue
// (or pull request), the text in a code block so that nothing in it (a
// reason) is read as Markdown or a mention; mentions are the principals'
// logins from the trust policy. A final notice closes a decision issue
// (completed when approved, not planned otherwise: a closed one is closed
// again with that reason), and a notice that reopens the decision reopens
// it; a pull request stays open.
func (p *Poster) FollowUp(ctx context.Context, post bridge.Post, v *bridge.View, n bridge.Notice) error {
	var b strings.Builder
	for _, pr := range n.Mention {
		if pr.GitHub != "" {
			fmt.Fprintf(&b, "@%s ", pr.GitHub)
		}
	}
	if b.Len() > 0 {
		b.WriteString("\n\n")
	}
	fence(&b, strings.Split(n.Text, "\n"))
	fmt.Fprintf(&b, "Fingerprint `%s`\n", v.Plan.Fingerprint)
	if _, _, err := p.Client.Issues.CreateComment(ctx, p.Owner, p.Repo, post.GitHubIssue, &github.IssueComment{Body: github.String(b.String())}); err != nil {
		return fmt.Errorf("commenting on #%d: %w", post.GitHubIssue, err)
	}
	if post.GitHubPR {
		return nil
	}
	if n.Reopened {
		req := &github.IssueRequest{State: github.String("open"), StateReason: github.String("reopened")}
		if _, _, err := p.Client.Issues.Edit(ctx, p.Owner, p.Repo, post.GitHubIssue, req); err != nil {
			return fmt.Errorf("reopening #%d: %w", post.GitHubIssue, err)
		}
		return nil
	}
	if !n.Final {
		return nil
	}
	reason := "not_planned"
	if n.Approved {
		reason = "completed"
	}
	if _, _, err := p.Client.Issues.Edit(ctx, p.Owner, p.Repo, post.GitHubIssue, &github.IssueRequest{State: github.String("closed"), StateReason: github.String(reason)}); err != nil {
		return fmt.Errorf("closing #%d: %w", post.GitHubIssue, err)
	}
	return nil
}

// Escalate implements [bridge.Follower]: a comment mentioning to (an
// @team or @login from the configuration) on the same issue.
func (p *Poster) Escalate(ctx context.Context, post bridge.Post, v *bridge.View, to string, n bridge.Notice) (*bridge.Post, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", to)
	fence(&b, []string{n.Text})
	if _, _, err := p.Client.Issues.CreateComment(ctx, p.Owner, p.Repo, post.GitHubIssue, &github.IssueComment{Body: github.String(b.String())}); err != nil {
		return nil, fmt.Errorf("commenting on #%d: %w", post.GitHubIssue, err)
	}
	return nil, nil
}

var _ bridge.Announcer = (*Poster)(nil)

// Announce implements [bridge.Announcer]: a comment on the pull request
// when there is one, else an issue; the text in a code block, mentions
// from the trust policy's logins.
func (p *Poster) Announce(ctx context.Context, fp, record string, at time.Time, n bridge.Notice) (bridge.Post, error) {
	var b strings.Builder
	for _, pr := range n.Mention {
		if pr.GitHub != "" {
			fmt.Fprintf(&b, "@%s ", pr.GitHub)
		}
	}
	if b.Len() > 0 {
		b.WriteString("\n\n")
	}
	fence(&b, strings.Split(n.Text, "\n"))
	fmt.Fprintf(&b, "Fingerprint `%s`\n", fp)
	post := bridge.Post{Kind: bridge.KindGitHub, Fingerprint: fp, Record: record, Posted: at, GitHubRepo: p.Owner + "/" + p.Repo}
	if p.PR != 0 {
		c, _, err := p.Client.Issues.CreateComment(ctx, p.Owner, p.Repo, p.PR, &github.IssueComment{Body: github.String(b.String())})
		if err != nil {
			return bridge.Post{}, fmt.Errorf("commenting on pull request %d: %w", p.PR, err)
		}
		post.GitHubIssue, post.GitHubPR, post.GitHubComment, post.URL = p.PR, true, c.GetID(), c.GetHTMLURL()
		return post, nil
	}
	is, _, err := p.Client.Issues.Create(ctx, p.Owner, p.Repo, &github.IssueRequest{Title: github.String(strings.SplitN(n.Text, "\n", 2)[0]), Body: github.String(b.String())})
	if err != nil {
		return bridge.Post{}, fmt.Errorf("opening a notice issue: %w", err)
	}
	post.GitHubIssue, post.URL = is.GetNumber(), is.GetHTMLURL()
	return post, nil
}
