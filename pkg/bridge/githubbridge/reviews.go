package githubbridge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/google/go-github/v66/github"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/visible"
)

// pollReviews reads the reviews of decision pull request number and
// judges each that carries a command exactly as a pull_request_review
// delivery is judged: a review whose delivery was lost, or came while the
// bridge was down, is still recorded, and one judged already (by a
// delivery or an earlier poll) is not judged again.
//
// The listing has no since: it is the whole pull request's, sent with the
// last listing's ETag, so an unchanged pull request whose reviews fit in
// one page (100) costs one request answered 304, which GitHub does not
// count; a longer one costs a request per page. The REST API's review has
// no edit time, so the reviews that carry a command and were not judged
// yet are looked up in one GraphQL query ([Poller.editedReviews]) before
// they are judged; once judged they cost nothing more.
func (p *Poller) pollReviews(ctx context.Context, number int, posts []bridge.Post, n *Counts) error {
	rvs, cur, err := p.reviews(ctx, number)
	if err != nil {
		return err
	}
	if rvs == nil {
		n.NotModified++
		return nil
	}
	var cmds, todo []item
	var nodes []string
	for _, rv := range rvs {
		it := reviewItem(number, rv)
		if it.id == 0 {
			continue
		}
		if _, _, _, ok := ParseCommand(it.body); !ok {
			continue
		}
		cmds = append(cmds, it)
		p.mu.Lock()
		p.init()
		judged := p.settled[it.key()] || p.busy[it.key()]
		p.mu.Unlock()
		if !judged {
			todo = append(todo, it)
			nodes = append(nodes, rv.GetNodeID())
		}
	}
	if len(todo) > 0 {
		edited, err := p.editedReviews(ctx, todo, nodes)
		if err != nil {
			// Judge nothing unchecked; the ETag is not kept, so the
			// next poll reads these reviews again.
			return err
		}
		for i := range todo {
			todo[i].edited = edited[i]
		}
	}
	for _, it := range todo {
		if _, err := p.judge(ctx, it, posts, n); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, it := range cmds {
		if !p.settled[it.key()] {
			// Judged elsewhere right now (a webhook delivery, which may
			// fail and be judged again): read the listing again next
			// time rather than be told nothing changed.
			cur = nil
			break
		}
	}
	p.reviewCursors[number] = cur
	return nil
}

// reviews lists a pull request's reviews, oldest first, following
// pagination, sending If-None-Match with the last listing's ETag. It
// returns nil reviews when GitHub answers 304 (not modified), and the
// cursor to keep once the reviews are judged. (The REST endpoint is the
// one [github.PullRequestsService.ListReviews] calls, which cannot send
// If-None-Match.)
func (p *Poller) reviews(ctx context.Context, number int) ([]*github.PullRequestReview, *cursor, error) {
	p.mu.Lock()
	p.init()
	prev := p.reviewCursors[number]
	p.mu.Unlock()
	path := fmt.Sprintf("repos/%s/%s/pulls/%d/reviews", url.PathEscape(p.Owner), url.PathEscape(p.Repo), number)
	all, next, notModified, err := list[*github.PullRequestReview](ctx, p.Client, path, url.Values{"per_page": {"100"}}, prev)
	if notModified {
		return nil, prev, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing reviews of pull request %d: %w", number, err)
	}
	if all == nil {
		all = []*github.PullRequestReview{} // not nil: nil means not modified
	}
	return all, next, nil
}

// graphQLPath is GitHub's GraphQL endpoint relative to the REST API's base
// URL: https://api.github.com/graphql for https://api.github.com/, and
// https://HOST/api/graphql for GitHub Enterprise Server's
// https://HOST/api/v3/.
const graphQLPath = "../graphql"

// reviewEditsQuery asks GitHub's GraphQL API what its REST API does not
// show of a review: whether its body was edited since it was submitted.
const reviewEditsQuery = `query($ids: [ID!]!) { nodes(ids: $ids) { ... on PullRequestReview { body lastEditedAt includesCreatedEdit } } }`

// maxNodes is how many ids one GraphQL nodes query may ask for.
const maxNodes = 100

// editedReviews reports, for each review its (with its node id in nodes),
// whether it was edited after it was submitted, or cannot be shown not to
// have been: GitHub lets repository admins edit anyone's review, and a
// poll, unlike a webhook delivery, sees only the body as it is now. A
// review counts as unedited only when GraphQL, asked after the listing
// was read, says it was never edited and shows the body the listing
// showed (a replica behind the listing's could show the body before an
// edit as never edited). One query per 100 reviews.
func (p *Poller) editedReviews(ctx context.Context, its []item, nodes []string) ([]bool, error) {
	edited := make([]bool, len(its))
	for start := 0; start < len(its); start += maxNodes {
		end := min(start+maxNodes, len(its))
		var ids []string
		var at []int
		for i := start; i < end; i++ {
			if nodes[i] == "" {
				edited[i] = true
				continue
			}
			ids, at = append(ids, nodes[i]), append(at, i)
		}
		if len(ids) == 0 {
			continue
		}
		got, err := p.reviewNodes(ctx, ids)
		if err != nil {
			return nil, err
		}
		for j, i := range at {
			rn := got[j]
			edited[i] = rn == nil || rn.Body == nil || *rn.Body != its[i].body || rn.LastEditedAt != nil ||
				rn.IncludesCreatedEdit == nil || *rn.IncludesCreatedEdit
		}
	}
	return edited, nil
}

// reviewNode is what [reviewEditsQuery] returns of a review.
type reviewNode struct {
	Body                *string `json:"body"`
	LastEditedAt        *string `json:"lastEditedAt"`
	IncludesCreatedEdit *bool   `json:"includesCreatedEdit"`
}

// reviewNodes sends [reviewEditsQuery] for ids and returns a node for
// each, in order; nil for an id GitHub did not resolve (NOT_FOUND). Any
// other error in the answer fails the whole query.
func (p *Poller) reviewNodes(ctx context.Context, ids []string) ([]*reviewNode, error) {
	body := map[string]any{"query": reviewEditsQuery, "variables": map[string]any{"ids": ids}}
	req, err := p.Client.NewRequest(http.MethodPost, graphQLPath, body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Data *struct {
			Nodes []*reviewNode `json:"nodes"`
		} `json:"data"`
		Errors []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if _, err := p.Client.Do(ctx, req, &out); err != nil {
		return nil, fmt.Errorf("asking GitHub's GraphQL API whether reviews were edited: %w", err)
	}
	for _, e := range out.Errors {
		if e.Type != "NOT_FOUND" {
			return nil, fmt.Errorf("asking GitHub's GraphQL API whether reviews were edited: %s (%s)", visible.Text(e.Message), visible.Text(e.Type))
		}
	}
	if out.Data == nil || len(out.Data.Nodes) != len(ids) {
		return nil, fmt.Errorf("asking GitHub's GraphQL API whether reviews were edited: the answer does not have a node for each of %d ids", len(ids))
	}
	return out.Data.Nodes, nil
}
