package githubbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v66/github"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// Poller reads decision comments (and, on a decision pull request, its
// reviews) and records the answers that count. It is the fallback to
// [Webhook], which shares its judgement (and so what it has settled) when
// given the same Poller.
type Poller struct {
	Client      *github.Client
	Owner, Repo string
	Attestor    *bridge.Attestor
	Ledger      *bridge.Ledger
	Log         *slog.Logger
	// Token is used only to scrub errors before they are logged.
	Token bridge.Secret

	mu sync.Mutex
	// settled holds comments and reviews already recorded or refused for
	// good, so each is judged, acknowledged and logged once per process
	// (the store's dedupe covers restarts); busy those being judged now,
	// by the poller or a webhook delivery.
	settled, busy map[itemKey]bool
	// replied holds the commands a refusal reply of the bridge's (its
	// signed marker) was seen for, in any listing so far: a command judged
	// in a later poll than the one that read the reply (a review, whose
	// listing may fail after the comments were read) gets no second one.
	replied map[itemKey]bool
	// cursors are where reading each issue's comments got to;
	// reviewCursors hold the ETag of each pull request's last review
	// listing.
	cursors, reviewCursors map[int]*cursor
}

// Counts is what one poll did.
type Counts struct {
	Recorded, Duplicates, Refused, Ignored int
	// NotModified counts listings (an issue's comments, a pull request's
	// reviews) GitHub answered 304 for: nothing new, and no rate limit
	// spent.
	NotModified int
}

// cursor is what a poll remembers of an issue's comments: the newest
// update time it read (the next listing asks only for comments updated
// since) and the ETag of the last listing, if it fit in one page, which
// the next identical listing sends as If-None-Match.
type cursor struct {
	since time.Time
	url   string
	etag  string
}

// item is a command-bearing comment or review, however it was read.
type item struct {
	review bool
	id     int64
	number int // the issue or pull request
	login  string
	userID int64
	body   string
	// issued is the comment's creation or the review's submission time.
	issued time.Time
	edited bool
	// state is a review's state, in upper case (APPROVED,
	// CHANGES_REQUESTED, COMMENTED…).
	state string
}

type itemKey struct {
	review bool
	id     int64
}

func (it item) key() itemKey { return itemKey{it.review, it.id} }

func (it item) what() string {
	if it.review {
		return "review"
	}
	return "comment"
}

func commentItem(number int, c *github.IssueComment) item {
	return item{id: c.GetID(), number: number, login: c.GetUser().GetLogin(), userID: c.GetUser().GetID(),
		body: c.GetBody(), issued: c.GetCreatedAt().Time, edited: edited(c)}
}

// reviewItem is review rv of pull request number, as a webhook delivers it
// or the REST API lists it. Whether it was edited is not in it: a
// delivery's action says so, a listing's [Poller.editedReviews].
func reviewItem(number int, rv *github.PullRequestReview) item {
	return item{review: true, id: rv.GetID(), number: number, login: rv.GetUser().GetLogin(), userID: rv.GetUser().GetID(),
		body: rv.GetBody(), issued: rv.GetSubmittedAt().Time, state: strings.ToUpper(rv.GetState())}
}

// Run polls every interval until ctx is done. While GitHub's rate limit
// holds requests back it waits for the limit instead, and says so once.
func (p *Poller) Run(ctx context.Context, interval time.Duration) {
	var warned time.Time
	for {
		wait := interval
		_, err := p.PollOnce(ctx)
		var rl *RateLimitedError
		switch {
		case errors.As(err, &rl):
			wait = max(wait, rl.Wait)
			if !rl.Until.Equal(warned) {
				p.Log.Warn("github: rate limited, polling paused", "until", rl.Until.UTC().Format(time.RFC3339), "why", rl.Why)
				warned = rl.Until
			}
		case err != nil && ctx.Err() == nil:
			p.Log.Warn("github: poll failed", "error", bridge.Redact(err.Error(), p.Token))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// PollOnce reads the new comments of every open decision in the repository
// (and the reviews of a decision pull request) and records the answers
// among them. It stops at the first request the rate limit holds back,
// returning a [*RateLimitedError].
func (p *Poller) PollOnce(ctx context.Context) (Counts, error) {
	var n Counts
	byIssue, err := p.decisions()
	if err != nil {
		return n, err
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
		err := p.pollIssue(ctx, is, byIssue[is], &n)
		if rl := rateLimited(err); rl != nil {
			return n, rl
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return n, firstErr
}

// rateLimited returns err as a rate limit: the [Limiter]'s, or go-github's
// own record of a primary or secondary limit (which it keeps on 403s and
// checks before the Limiter sees a request), or nil.
func rateLimited(err error) *RateLimitedError {
	var rl *RateLimitedError
	var primary *github.RateLimitError
	var secondary *github.AbuseRateLimitError
	switch {
	case errors.As(err, &rl):
		return rl
	case errors.As(err, &primary) && primary.Rate.Reset.After(time.Now()):
		return &RateLimitedError{Until: primary.Rate.Reset.Time, Wait: time.Until(primary.Rate.Reset.Time), Why: "go-github: primary rate limit"}
	case errors.As(err, &secondary):
		wait := BackoffMin
		if secondary.RetryAfter != nil && *secondary.RetryAfter > 0 {
			wait = *secondary.RetryAfter
		}
		return &RateLimitedError{Until: time.Now().Add(wait), Wait: wait, Why: "go-github: secondary rate limit"}
	}
	return nil
}

// decisions returns the posts of this repository's decisions, by issue or
// pull request number.
func (p *Poller) decisions() (map[int][]bridge.Post, error) {
	posts, err := p.Ledger.All()
	if err != nil {
		return nil, err
	}
	repo := p.Owner + "/" + p.Repo
	byIssue := map[int][]bridge.Post{}
	for _, post := range posts {
		if post.Kind == bridge.KindGitHub && strings.EqualFold(post.GitHubRepo, repo) && post.GitHubIssue > 0 {
			byIssue[post.GitHubIssue] = append(byIssue[post.GitHubIssue], post)
		}
	}
	return byIssue, nil
}

// open reports whether any decision among posts can still take an answer.
func (p *Poller) open(posts []bridge.Post) bool {
	for _, post := range posts {
		v, err := bridge.Describe(p.Attestor.Source.Now(), post.Fingerprint, post.Record, p.Attestor.Now())
		if err == nil && !v.Closed() {
			return true
		}
	}
	return false
}

// pollIssue reads an issue's new comments and, when decisions were posted
// on it as a pull request, the pull request's reviews.
func (p *Poller) pollIssue(ctx context.Context, number int, posts []bridge.Post, n *Counts) error {
	if err := p.pollComments(ctx, number, posts, n); err != nil {
		return err
	}
	for _, post := range posts {
		if post.GitHubPR {
			return p.pollReviews(ctx, number, posts, n)
		}
	}
	return nil
}

// pollComments reads an issue's comments since the last it read and judges
// those that carry a command.
func (p *Poller) pollComments(ctx context.Context, number int, posts []bridge.Post, n *Counts) error {
	comments, cur, err := p.comments(ctx, number)
	if err != nil {
		return err
	}
	if comments == nil {
		n.NotModified++
		return nil
	}
	var seen []itemKey
	for _, c := range comments {
		if k, ok := p.refusalReplyTo(c.GetBody()); ok {
			seen = append(seen, k)
		}
	}
	p.mu.Lock()
	for _, k := range seen {
		p.replied[k] = true
	}
	p.mu.Unlock()
	for _, c := range comments {
		it := commentItem(number, c)
		if it.id == 0 {
			continue
		}
		if _, _, _, ok := ParseCommand(it.body); !ok {
			continue
		}
		if _, err := p.judge(ctx, it, posts, n); err != nil {
			// Read this issue from where it was next time.
			return err
		}
	}
	p.mu.Lock()
	p.cursors[number] = cur
	p.mu.Unlock()
	return nil
}

// init makes the poller's maps; p.mu is held.
func (p *Poller) init() {
	if p.settled == nil {
		p.settled, p.busy, p.replied = map[itemKey]bool{}, map[itemKey]bool{}, map[itemKey]bool{}
		p.cursors, p.reviewCursors = map[int]*cursor{}, map[int]*cursor{}
	}
}

// Outcomes of judging a command.
const (
	outRecorded  = "recorded"
	outDuplicate = "already recorded"
	outRefused   = "refused"
	outIgnored   = "ignored"
	outSettled   = "already judged"
)

// judge decides what a command counts for, records it if it does, and
// answers on GitHub: an acknowledgement when recorded, a reply saying why
// when refused and its author is someone the trust policy knows (by login
// or id; a stranger gets no reply, so the bot cannot be made to spam),
// unless a reply of the bridge's to it was already read on GitHub. It
// returns an error only when the answer could not be stored; the command
// is then judged again later.
func (p *Poller) judge(ctx context.Context, it item, posts []bridge.Post, n *Counts) (string, error) {
	k := it.key()
	p.mu.Lock()
	p.init()
	if p.settled[k] || p.busy[k] {
		p.mu.Unlock()
		return outSettled, nil
	}
	p.busy[k] = true
	replied := p.replied[k]
	p.mu.Unlock()
	settle := true
	defer func() {
		p.mu.Lock()
		delete(p.busy, k)
		if settle {
			p.settled[k] = true
		}
		p.mu.Unlock()
	}()

	log := p.Log.With("issue", it.number, it.what(), it.id, "login", it.login, "user_id", it.userID)
	verdict, fp, reason, ok := ParseCommand(it.body)
	if !ok {
		n.Ignored++
		return outIgnored, nil
	}
	if it.edited {
		log.Info("github: edited " + it.what() + " does not count")
		n.Ignored++
		return outIgnored, nil
	}
	if it.review {
		switch it.state {
		case "DISMISSED", "PENDING":
			// A listing shows a review as it is now: dismissed (after
			// it was recorded, perhaps, which dismissing does not
			// undo) or not yet submitted. Neither answers anything,
			// and neither is told it was refused.
			log.Info("github: a " + strings.ToLower(it.state) + " review does not count")
			n.Ignored++
			return outIgnored, nil
		}
		want := map[string]string{"APPROVED": approval.Approve, "CHANGES_REQUESTED": approval.Deny}[it.state]
		if want != verdict {
			r := refusal.New(refusal.ParamInvalid, "the review's state is %s but its first line is /%s: a review counts only as Approve with /approve, or Request changes with /deny", it.state, verdict)
			log.Info("github: answer not recorded", "fingerprint", fp, "code", r.Code, "reason", r.Reason)
			n.Refused++
			p.replyRefused(ctx, it, r, replied)
			return outRefused, nil
		}
	}
	post, ok := pick(posts, fp, it)
	if !ok {
		log.Info("github: "+it.what()+" names a fingerprint with no decision here", "fingerprint", fp)
		n.Ignored++
		return outIgnored, nil
	}
	ch := approval.Channel{Kind: bridge.KindGitHub, GitHubLogin: it.login, GitHubUserID: it.userID, GitHubRepo: p.Owner + "/" + p.Repo}
	if it.review {
		ch.GitHubReview = it.id
	} else {
		ch.GitHubComment = it.id
	}
	res, err := p.Attestor.Answer(bridge.Request{
		Fingerprint: fp, Record: post.Record, Verdict: verdict, Reason: reason, Channel: ch, Issued: it.issued,
	})
	if r, ok := refusal.As(err); ok {
		log.Info("github: answer not recorded", "fingerprint", fp, "code", r.Code, "reason", r.Reason)
		n.Refused++
		p.replyRefused(ctx, it, r, replied)
		return outRefused, nil
	}
	if err != nil {
		settle = false
		return "", fmt.Errorf("recording %s %d: %w", it.what(), it.id, err)
	}
	if res.Duplicate {
		n.Duplicates++
		return outDuplicate, nil
	}
	n.Recorded++
	log.Info("github: answer recorded", "fingerprint", fp, "answer", res.ID, "approver", res.Approver, "verdict", res.Verdict)
	p.acknowledge(ctx, it, res)
	return outRecorded, nil
}

// pick finds the decision a command answers: on an issue, the issue's
// decision for that fingerprint; on a pull request, the newest decision
// comment for it that precedes the command (a review: that was posted
// before it was submitted).
func pick(posts []bridge.Post, fp string, it item) (bridge.Post, bool) {
	var best bridge.Post
	found := false
	for _, post := range posts {
		if post.Fingerprint != fp || post.GitHubIssue != it.number {
			continue
		}
		switch {
		case it.review:
			// The bridge's clock dates a post, GitHub's a review.
			if !post.GitHubPR || post.Posted.After(it.issued.Add(approval.ClockSkew)) {
				continue
			}
		case post.GitHubPR:
			if post.GitHubComment >= it.id {
				continue
			}
		}
		// posts are oldest first (the ledger's order): keep the newest
		// that fits.
		if !found || !post.GitHubPR || post.GitHubComment > best.GitHubComment {
			best, found = post, true
		}
	}
	return best, found
}

// acknowledge answers a recorded command with a comment showing the
// decision's state.
func (p *Poller) acknowledge(ctx context.Context, it item, res *bridge.Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "Recorded: **%s** by %s (@%s, %s %d), answer `%s`.\n\n", res.Verdict, res.Approver, it.login, it.what(), it.id, res.ID)
	fence(&b, bridge.StatusLines(res.View))
	p.comment(ctx, it.number, b.String(), "acknowledging")
}

// refusalMarker tags a reply to a refused command, so that a restarted
// bridge, reading the issue again, does not reply twice. It carries the
// bridge's signature of what it marks ([bridge.Attestor.Mark]): anyone who
// can comment could otherwise write the marker of a command the bridge has
// not answered, and silence the reply that says why it does not count.
const refusalMarker = "<!-- prod-write: refused %s %d %s -->"

// refusalMark is what the marker of the reply to command id ("comment" or
// "review") in this repository signs.
func (p *Poller) refusalMark(what string, id int64) string {
	return fmt.Sprintf("github refusal reply %s/%s %s %d", p.Owner, p.Repo, what, id)
}

// refusalReplyTo returns the command a comment is the bridge's refusal
// reply to: a marker whose signature is not the bridge's is no reply.
func (p *Poller) refusalReplyTo(body string) (itemKey, bool) {
	var what, sig string
	var id int64
	i := strings.LastIndex(body, "<!-- prod-write: refused ")
	if i < 0 {
		return itemKey{}, false
	}
	if _, err := fmt.Sscanf(body[i:], refusalMarker, &what, &id, &sig); err != nil || (what != "comment" && what != "review") {
		return itemKey{}, false
	}
	if !p.Attestor.Marked(p.refusalMark(what, id), sig) {
		return itemKey{}, false
	}
	return itemKey{review: what == "review", id: id}, true
}

// replyRefused says on GitHub why a command was not recorded, when its
// author is known to the trust policy by login or by id.
func (p *Poller) replyRefused(ctx context.Context, it item, r *refusal.Error, replied bool) {
	policy := p.Attestor.Source.Now().Policy
	_, byLogin := policy.ByGitHub(it.login)
	_, byID := policy.ByGitHubID(it.userID)
	if replied || (!byLogin && !byID) {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Not recorded: the %s by @%s (%s %d) does not count (%s).\n\n", it.what(), it.login, it.what(), it.id, r.Code)
	fence(&b, []string{r.Reason})
	fmt.Fprintf(&b, refusalMarker+"\n", it.what(), it.id, p.Attestor.Mark(p.refusalMark(it.what(), it.id)))
	p.comment(ctx, it.number, b.String(), "replying to a refused command")
}

func (p *Poller) comment(ctx context.Context, number int, body, doing string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, _, err := p.Client.Issues.CreateComment(ctx, p.Owner, p.Repo, number, &github.IssueComment{Body: github.String(body)}); err != nil {
		p.Log.Warn("github: "+doing+" failed", "issue", number, "error", bridge.Redact(err.Error(), p.Token))
	}
}

// comments lists the comments of an issue updated since the last listing
// read, following pagination, sending If-None-Match with the last
// listing's ETag. It returns nil comments when GitHub answers 304 (not
// modified), and the cursor to keep once the comments are judged.
func (p *Poller) comments(ctx context.Context, number int) ([]*github.IssueComment, *cursor, error) {
	p.mu.Lock()
	p.init()
	prev := p.cursors[number]
	p.mu.Unlock()
	q := url.Values{"per_page": {"100"}}
	if prev != nil && !prev.since.IsZero() {
		q.Set("since", prev.since.UTC().Format(time.RFC3339))
	}
	path := fmt.Sprintf("repos/%s/%s/issues/%d/comments", url.PathEscape(p.Owner), url.PathEscape(p.Repo), number)
	all, next, notModified, err := list[*github.IssueComment](ctx, p.Client, path, q, prev)
	if notModified {
		return nil, prev, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing comments of #%d: %w", number, err)
	}
	if all == nil {
		all = []*github.IssueComment{} // not nil: nil means not modified
	}
	next.since = sinceOf(prev)
	for _, c := range all {
		// GitHub's since keeps comments updated at or after it: the
		// newest read is read again next time, and a comment made in
		// the same second as it is not missed.
		if t := c.GetUpdatedAt().Time; t.After(next.since) {
			next.since = t
		}
	}
	if !next.since.Equal(sinceOf(prev)) {
		// Another since is another URL, whose ETag is not known yet.
		next.url, next.etag = "", ""
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].GetID() < all[j].GetID() })
	return all, next, nil
}

// maxPages bounds one listing.
const maxPages = 1000

// list GETs path with the query q and the pages that follow (at most
// [maxPages]), each a JSON array of T. On the first page it sends
// If-None-Match with prev's ETag when prev listed the same first URL, and
// a 304 returns notModified (and costs no rate limit). next names the
// first URL and, when the listing fit in one page, its ETag: an ETag
// stands for one page, so a listing longer than one is fetched in full
// next time, or an item added to a later page would go unseen.
func list[T any](ctx context.Context, c *github.Client, path string, q url.Values, prev *cursor) (all []T, next *cursor, notModified bool, err error) {
	first := path + "?" + q.Encode()
	next = &cursor{url: first}
	u := first
	for page := 1; page <= maxPages; page++ {
		req, err := c.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			return nil, nil, false, err
		}
		if page == 1 && prev != nil && prev.etag != "" && prev.url == first {
			req.Header.Set("If-None-Match", prev.etag)
		}
		var items []T
		resp, err := c.Do(ctx, req, &items)
		if page == 1 && resp != nil && resp.StatusCode == http.StatusNotModified {
			return nil, nil, true, nil
		}
		if err != nil {
			return nil, nil, false, err
		}
		all = append(all, items...)
		if resp.NextPage == 0 {
			if page == 1 {
				next.etag = resp.Header.Get("ETag")
			}
			break
		}
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Set("page", fmt.Sprint(resp.NextPage))
		u = path + "?" + nq.Encode()
	}
	return all, next, false, nil
}

func sinceOf(c *cursor) time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.since
}
