package bridgetest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FakeGitHub is an httptest fake of the parts of GitHub's REST API the
// bridge uses (issues, issue comments, with pagination, `since` and
// conditional requests; a pull request's reviews, with pagination and
// conditional requests), for one repository, under the path prefix
// /api/v3/ as on GitHub Enterprise Server, so a client that builds
// absolute paths fails; and of its GraphQL API (at /api/graphql, as on
// GitHub Enterprise Server), the one query the bridge sends: whether
// reviews were edited. It keeps a primary rate limit the way GitHub does
// (a 304 costs nothing) and [FakeGitHub.Throttle] makes it answer with a
// rate-limit response.
type FakeGitHub struct {
	*httptest.Server
	Owner, Repo, Token string
	// BotLogin authors what the token posts.
	BotLogin string

	mu        sync.Mutex
	issues    map[int]*FakeIssue
	nextID    int64
	throttled []throttle
	// graphQLFail is how many GraphQL queries to answer with an error.
	graphQLFail int
	stats       FakeGitHubStats
	// rmu guards remaining, which is charged while mu is held.
	rmu       sync.Mutex
	remaining int
}

// FakeGitHubStats counts the requests the fake answered.
type FakeGitHubStats struct {
	// Requests is every authenticated request, whatever its answer.
	Requests int
	// Lists is how many comment listings were answered in full (200);
	// NotModified how many with 304.
	Lists, NotModified int
	// ReviewLists is how many review listings (pages) were answered in
	// full; ReviewsNotModified how many with 304.
	ReviewLists, ReviewsNotModified int
	// GraphQL is how many GraphQL queries were answered, and GraphQLIDs
	// how many node ids they asked for.
	GraphQL, GraphQLIDs int
	// Throttled is how many got a rate-limit response.
	Throttled int
	// Since is the since parameter of the last comment listing.
	Since string
}

type throttle struct {
	status int
	header map[string]string
	body   string
}

// GitHubUserID is the numeric user id the fake gives login (the same in
// any case), which the test trust policies map.
func GitHubUserID(login string) int64 {
	sum := sha256.Sum256([]byte("fake github user: " + strings.ToLower(login)))
	return 1000 + int64(binary.BigEndian.Uint32(sum[:4])>>1)
}

// FakeIssue is an issue or pull request of the fake.
type FakeIssue struct {
	Number      int
	Title, Body string
	State       string
	StateReason string
	Comments    []*FakeComment
	// Reviews are a pull request's reviews, oldest first.
	Reviews []*FakeReview
}

// FakeComment is an issue comment of the fake.
type FakeComment struct {
	ID        int64
	Login     string
	UserID    int64
	Body      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// fakeRateLimit is the fake's primary rate limit per token, as GitHub's
// for a personal access token.
const fakeRateLimit = 5000

// NewFakeGitHub starts a fake GitHub API for owner/repo that accepts token.
func NewFakeGitHub(owner, repo, token string) *FakeGitHub {
	f := &FakeGitHub{Owner: owner, Repo: repo, Token: token, BotLogin: "prod-write-bot", issues: map[int]*FakeIssue{}, nextID: 9000, remaining: fakeRateLimit}
	mux := http.NewServeMux()
	prefix := "/api/v3/repos/" + owner + "/" + repo
	mux.HandleFunc("POST "+prefix+"/issues", f.createIssue)
	mux.HandleFunc("PATCH "+prefix+"/issues/{n}", f.editIssue)
	mux.HandleFunc("GET "+prefix+"/issues/{n}/comments", f.listComments)
	mux.HandleFunc("POST "+prefix+"/issues/{n}/comments", f.createComment)
	mux.HandleFunc("GET "+prefix+"/pulls/{n}/reviews", f.listReviews)
	mux.HandleFunc("POST /api/graphql", f.graphQL)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.Token {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"message":"Bad credentials"}`)
			return
		}
		f.mu.Lock()
		f.stats.Requests++
		if len(f.throttled) > 0 {
			th := f.throttled[0]
			f.throttled = f.throttled[1:]
			f.stats.Throttled++
			f.mu.Unlock()
			for k, v := range th.header {
				w.Header().Set(k, v)
			}
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(th.status)
			fmt.Fprint(w, th.body)
			return
		}
		f.mu.Unlock()
		mux.ServeHTTP(&rateWriter{ResponseWriter: w, f: f}, r)
	}))
	return f
}

// rateWriter sets GitHub's primary rate-limit headers on a response and
// charges the request to the limit unless it is a 304: GitHub does not
// count a conditional request answered "not modified".
type rateWriter struct {
	http.ResponseWriter
	f     *FakeGitHub
	wrote bool
}

func (w *rateWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.f.rmu.Lock()
	if code != http.StatusNotModified && w.f.remaining > 0 {
		w.f.remaining--
	}
	rem := w.f.remaining
	w.f.rmu.Unlock()
	h := w.Header()
	h.Set("X-Ratelimit-Limit", strconv.Itoa(fakeRateLimit))
	h.Set("X-Ratelimit-Remaining", strconv.Itoa(rem))
	h.Set("X-Ratelimit-Used", strconv.Itoa(fakeRateLimit-rem))
	h.Set("X-Ratelimit-Resource", "core")
	h.Set("X-Ratelimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
	w.ResponseWriter.WriteHeader(code)
}

func (w *rateWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Throttle makes the next n requests answer status with header and a
// GitHub error body, as GitHub's rate limits do: 429, or 403 with
// x-ratelimit-remaining 0, or 403 naming the secondary rate limit.
func (f *FakeGitHub) Throttle(n, status int, header map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body := `{"message":"API rate limit exceeded","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`
	if header["X-Ratelimit-Remaining"] != "0" {
		body = `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`
	}
	for i := 0; i < n; i++ {
		f.throttled = append(f.throttled, throttle{status: status, header: header, body: body})
	}
}

// ThrottleWith is [FakeGitHub.Throttle] with a body of its own: a
// secondary limit whose body go-github does not recognise as one.
func (f *FakeGitHub) ThrottleWith(n, status int, header map[string]string, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 0; i < n; i++ {
		f.throttled = append(f.throttled, throttle{status: status, header: header, body: body})
	}
}

// Forbid makes the next request answer 403 with body, as a token that
// lacks a permission gets: not a rate limit.
func (f *FakeGitHub) Forbid(body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttled = append(f.throttled, throttle{status: http.StatusForbidden, body: body})
}

// Stats returns what the fake answered so far.
func (f *FakeGitHub) Stats() FakeGitHubStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// RateRemaining is what is left of the fake's primary rate limit.
func (f *FakeGitHub) RateRemaining() int {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	return f.remaining
}

// APIURL is the base URL to give the bridge (bridge.github_api).
func (f *FakeGitHub) APIURL() string { return f.URL + "/api/v3/" }

// AddPR makes pull request number exist (as an issue, which is how the
// issues API sees it).
func (f *FakeGitHub) AddPR(number int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issues[number] = &FakeIssue{Number: number, Title: "a pull request", State: "open"}
}

// AddComment adds a comment by login (whose id is [GitHubUserID]) on issue
// number, made at created and, if edited, changed a minute later. It
// returns the comment's id.
func (f *FakeGitHub) AddComment(number int, login, body string, created time.Time, edited bool) int64 {
	return f.AddCommentBy(number, login, GitHubUserID(login), body, created, edited)
}

// AddCommentBy is [FakeGitHub.AddComment] by the account with user id id,
// which may differ from the login's usual one: a renamed or re-registered
// login.
func (f *FakeGitHub) AddCommentBy(number int, login string, id int64, body string, created time.Time, edited bool) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issues[number]
	if is == nil {
		return 0
	}
	f.nextID++
	c := &FakeComment{ID: f.nextID, Login: login, UserID: id, Body: body, CreatedAt: created.UTC().Truncate(time.Second), UpdatedAt: created.UTC().Truncate(time.Second)}
	if edited {
		c.UpdatedAt = c.UpdatedAt.Add(time.Minute)
	}
	is.Comments = append(is.Comments, c)
	return c.ID
}

// Issue returns a copy of issue number, or nil.
func (f *FakeGitHub) Issue(number int) *FakeIssue {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issues[number]
	if is == nil {
		return nil
	}
	cp := *is
	cp.Comments = append([]*FakeComment(nil), is.Comments...)
	return &cp
}

// Issues returns the numbers of all issues, sorted.
func (f *FakeGitHub) Issues() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for n := range f.issues {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

func (f *FakeGitHub) issue(w http.ResponseWriter, r *http.Request) *FakeIssue {
	n, _ := strconv.Atoi(r.PathValue("n"))
	is := f.issues[n]
	if is == nil {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found"}`)
	}
	return is
}

func (f *FakeGitHub) issueJSON(is *FakeIssue) map[string]any {
	return map[string]any{"number": is.Number, "title": is.Title, "body": is.Body, "state": is.State, "state_reason": is.StateReason,
		"html_url": fmt.Sprintf("https://github.invalid/%s/%s/issues/%d", f.Owner, f.Repo, is.Number)}
}

func (f *FakeGitHub) commentJSON(is *FakeIssue, c *FakeComment) map[string]any {
	return map[string]any{"id": c.ID, "body": c.Body, "user": map[string]any{"login": c.Login, "id": c.UserID, "type": "User"},
		"created_at": c.CreatedAt.Format(time.RFC3339), "updated_at": c.UpdatedAt.Format(time.RFC3339),
		"html_url": fmt.Sprintf("https://github.invalid/%s/%s/issues/%d#issuecomment-%d", f.Owner, f.Repo, is.Number, c.ID)}
}

func (f *FakeGitHub) createIssue(w http.ResponseWriter, r *http.Request) {
	var req struct{ Title, Body string }
	if json.NewDecoder(r.Body).Decode(&req) != nil || req.Title == "" {
		w.WriteHeader(http.StatusUnprocessableEntity)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.issues) + 1
	for f.issues[n] != nil {
		n++
	}
	is := &FakeIssue{Number: n, Title: req.Title, Body: req.Body, State: "open"}
	f.issues[n] = is
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(f.issueJSON(is))
}

func (f *FakeGitHub) editIssue(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issue(w, r)
	if is == nil {
		return
	}
	var req struct {
		State       *string `json:"state"`
		StateReason *string `json:"state_reason"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	if req.State != nil {
		is.State = *req.State
	}
	if req.StateReason != nil {
		is.StateReason = *req.StateReason
	}
	_ = json.NewEncoder(w).Encode(f.issueJSON(is))
}

func (f *FakeGitHub) createComment(w http.ResponseWriter, r *http.Request) {
	var req struct{ Body string }
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issue(w, r)
	if is == nil {
		return
	}
	f.nextID++
	now := time.Now().UTC().Truncate(time.Second)
	c := &FakeComment{ID: f.nextID, Login: f.BotLogin, UserID: GitHubUserID(f.BotLogin), Body: req.Body, CreatedAt: now, UpdatedAt: now}
	is.Comments = append(is.Comments, c)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(f.commentJSON(is, c))
}

// listComments pages like GitHub: per_page (default 30), page (from 1),
// and a Link header with rel="next" while more remain; since keeps the
// comments updated at or after it; a response carries an ETag, and a
// request whose If-None-Match names the ETag of what it would get is
// answered 304 with no body.
func (f *FakeGitHub) listComments(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issue(w, r)
	if is == nil {
		return
	}
	q := r.URL.Query()
	per, _ := strconv.Atoi(q.Get("per_page"))
	if per <= 0 || per > 100 {
		per = 30
	}
	page, _ := strconv.Atoi(q.Get("page"))
	if page <= 0 {
		page = 1
	}
	var since time.Time
	f.stats.Since = q.Get("since")
	if s := q.Get("since"); s != "" {
		var err error
		if since, err = time.Parse(time.RFC3339, s); err != nil {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"message":"Validation Failed"}`)
			return
		}
	}
	var match []*FakeComment
	for _, c := range is.Comments {
		if !c.UpdatedAt.Before(since) {
			match = append(match, c)
		}
	}
	start, end := (page-1)*per, page*per
	out := []map[string]any{}
	for i, c := range match {
		if i >= start && i < end {
			out = append(out, f.commentJSON(is, c))
		}
	}
	if end < len(match) {
		w.Header().Set("Link", fmt.Sprintf(`<%s%s?per_page=%d&page=%d&since=%s>; rel="next"`, f.URL, r.URL.Path, per, page+1, q.Get("since")))
	}
	body, _ := json.Marshal(out)
	sum := sha256.Sum256(append([]byte(w.Header().Get("Link")), body...))
	etag := `W/"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		f.stats.NotModified++
		w.WriteHeader(http.StatusNotModified)
		return
	}
	f.stats.Lists++
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(body)
}

// GitHubWebhook is a webhook delivery as GitHub sends it: event
// (X-GitHub-Event), delivery (X-GitHub-Delivery) and payload, signed
// with secret in X-Hub-Signature-256 (HMAC-SHA256 of the body).
func GitHubWebhook(url, secret, event, delivery string, payload []byte) *http.Request {
	r, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		panic(err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "GitHub-Hookshot/fake")
	r.Header.Set("X-GitHub-Event", event)
	r.Header.Set("X-GitHub-Delivery", delivery)
	r.Header.Set("X-Hub-Signature-256", SignGitHubWebhook(secret, payload))
	return r
}

// SignGitHubWebhook returns the X-Hub-Signature-256 of payload.
func SignGitHubWebhook(secret string, payload []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(payload)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// IssueCommentPayload is the payload of an issue_comment webhook for the
// comment c of issue number (a pull request when pr) of the fake's
// repository.
func (f *FakeGitHub) IssueCommentPayload(action string, number int, pr bool, c FakeComment) []byte {
	issue := map[string]any{"number": number, "state": "open", "title": "a decision"}
	if pr {
		issue["pull_request"] = map[string]any{"url": fmt.Sprintf("%s/api/v3/repos/%s/%s/pulls/%d", f.URL, f.Owner, f.Repo, number)}
	}
	created, updated := c.CreatedAt.UTC().Format(time.RFC3339), c.UpdatedAt.UTC().Format(time.RFC3339)
	payload := map[string]any{
		"action": action,
		"issue":  issue,
		"comment": map[string]any{"id": c.ID, "body": c.Body, "created_at": created, "updated_at": updated,
			"user": map[string]any{"login": c.Login, "id": c.UserID, "type": "User"}},
		"repository": f.repoJSON(),
		"sender":     map[string]any{"login": c.Login, "id": c.UserID, "type": "User"},
	}
	b, _ := json.Marshal(payload)
	return b
}

// FakeReview is a pull request review, for [FakeGitHub.ReviewPayload] and
// [FakeGitHub.AddReview].
type FakeReview struct {
	ID          int64
	Login       string
	UserID      int64
	Body        string
	State       string // approved, changes_requested, commented, dismissed (webhooks spell it in lower case, the REST API in upper case)
	SubmittedAt time.Time
	// LastEditedAt is when the body was last edited (GraphQL's
	// lastEditedAt); zero if never. The REST API does not show it.
	LastEditedAt time.Time
	// graphQLBody, when set, is the body GraphQL still shows: a replica
	// behind the one the REST API read.
	graphQLBody *string
}

// NodeID is the review's global node id, as the REST API gives it and
// GraphQL's nodes query takes it.
func (rv *FakeReview) NodeID() string { return fmt.Sprintf("PRR_fake%d", rv.ID) }

// AddReview adds review rv to pull request number as submitted, with no
// webhook delivered (the bridge was down, or the delivery was lost). An
// ID of 0 gets a fresh one; a zero SubmittedAt is now. It returns the
// review as stored.
func (f *FakeGitHub) AddReview(number int, rv FakeReview) FakeReview {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issues[number]
	if is == nil {
		return FakeReview{}
	}
	if rv.ID == 0 {
		f.nextID++
		rv.ID = f.nextID
	}
	if rv.SubmittedAt.IsZero() {
		rv.SubmittedAt = time.Now()
	}
	rv.SubmittedAt = rv.SubmittedAt.UTC().Truncate(time.Second)
	is.Reviews = append(is.Reviews, &rv)
	return rv
}

// EditReview changes the body of review id on pull request number, as a
// repository admin can: the REST API shows the new body and nothing else,
// GraphQL's lastEditedAt says when. With stale, GraphQL answers from a
// replica that has not seen the edit yet: the old body, never edited.
func (f *FakeGitHub) EditReview(number int, id int64, body string, stale bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rv := range f.issues[number].Reviews {
		if rv.ID == id {
			if stale {
				old := rv.Body
				rv.graphQLBody = &old
			} else {
				rv.LastEditedAt = time.Now().UTC().Truncate(time.Second)
			}
			rv.Body = body
		}
	}
}

// DismissReview dismisses review id on pull request number.
func (f *FakeGitHub) DismissReview(number int, id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rv := range f.issues[number].Reviews {
		if rv.ID == id {
			rv.State = "dismissed"
		}
	}
}

// FailGraphQL makes the next n GraphQL queries answer 200 with an error
// and no data, as GitHub does for a query it cannot run.
func (f *FakeGitHub) FailGraphQL(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.graphQLFail += n
}

// listReviews pages like GitHub: per_page (default 30), page (from 1),
// and a Link header with rel="next" while more remain, oldest first; no
// since. A response carries an ETag, and a request whose If-None-Match
// names the ETag of what it would get is answered 304 with no body.
func (f *FakeGitHub) listReviews(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issue(w, r)
	if is == nil {
		return
	}
	q := r.URL.Query()
	per, _ := strconv.Atoi(q.Get("per_page"))
	if per <= 0 || per > 100 {
		per = 30
	}
	page, _ := strconv.Atoi(q.Get("page"))
	if page <= 0 {
		page = 1
	}
	start, end := (page-1)*per, page*per
	out := []map[string]any{}
	for i, rv := range is.Reviews {
		if i >= start && i < end {
			out = append(out, map[string]any{"id": rv.ID, "node_id": rv.NodeID(), "body": rv.Body, "state": strings.ToUpper(rv.State),
				"submitted_at": rv.SubmittedAt.Format(time.RFC3339), "commit_id": "0123456789abcdef0123456789abcdef01234567",
				"user":     map[string]any{"login": rv.Login, "id": rv.UserID, "type": "User"},
				"html_url": fmt.Sprintf("https://github.invalid/%s/%s/pull/%d#pullrequestreview-%d", f.Owner, f.Repo, is.Number, rv.ID)})
		}
	}
	if end < len(is.Reviews) {
		w.Header().Set("Link", fmt.Sprintf(`<%s%s?per_page=%d&page=%d>; rel="next"`, f.URL, r.URL.Path, per, page+1))
	}
	body, _ := json.Marshal(out)
	sum := sha256.Sum256(append([]byte(w.Header().Get("Link")), body...))
	etag := `W/"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		f.stats.ReviewsNotModified++
		w.WriteHeader(http.StatusNotModified)
		return
	}
	f.stats.ReviewLists++
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(body)
}

// graphQL answers the one query the bridge sends: nodes(ids: $ids) with a
// review's body, lastEditedAt and includesCreatedEdit. An id that is no
// review of the fake's is null, with a NOT_FOUND error, as GitHub answers.
func (f *FakeGitHub) graphQL(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Query     string `json:"query"`
		Variables struct {
			IDs []string `json:"ids"`
		} `json:"variables"`
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if json.NewDecoder(r.Body).Decode(&req) != nil || !strings.Contains(req.Query, "nodes(ids: $ids)") ||
		!strings.Contains(req.Query, "lastEditedAt") || !strings.Contains(req.Query, "includesCreatedEdit") {
		fmt.Fprint(w, `{"errors":[{"message":"the fake answers only the bridge's query"}]}`)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.GraphQL++
	f.stats.GraphQLIDs += len(req.Variables.IDs)
	if f.graphQLFail > 0 {
		f.graphQLFail--
		fmt.Fprint(w, `{"errors":[{"type":"SERVICE_UNAVAILABLE","message":"Something went wrong while executing your query."}]}`)
		return
	}
	nodes := []any{}
	var errs []any
	for i, id := range req.Variables.IDs {
		var node any
		for _, is := range f.issues {
			for _, rv := range is.Reviews {
				if rv.NodeID() != id {
					continue
				}
				body, edited := rv.Body, any(nil)
				if rv.graphQLBody != nil {
					body = *rv.graphQLBody
				}
				if !rv.LastEditedAt.IsZero() {
					edited = rv.LastEditedAt.Format(time.RFC3339)
				}
				node = map[string]any{"id": id, "body": body, "lastEditedAt": edited, "includesCreatedEdit": edited != nil}
			}
		}
		if node == nil {
			errs = append(errs, map[string]any{"type": "NOT_FOUND", "path": []any{"nodes", i}, "message": fmt.Sprintf("Could not resolve to a node with the global id of '%s'", id)})
		}
		nodes = append(nodes, node)
	}
	out := map[string]any{"data": map[string]any{"nodes": nodes}}
	if errs != nil {
		out["errors"] = errs
	}
	_ = json.NewEncoder(w).Encode(out)
}

// ReviewPayload is the payload of a pull_request_review webhook for review
// rv of pull request number of the fake's repository.
func (f *FakeGitHub) ReviewPayload(action string, number int, rv FakeReview) []byte {
	payload := map[string]any{
		"action":       action,
		"pull_request": map[string]any{"number": number, "state": "open", "title": "a decision"},
		"review": map[string]any{"id": rv.ID, "body": rv.Body, "state": rv.State, "submitted_at": rv.SubmittedAt.UTC().Format(time.RFC3339),
			"user": map[string]any{"login": rv.Login, "id": rv.UserID, "type": "User"}},
		"repository": f.repoJSON(),
		"sender":     map[string]any{"login": rv.Login, "id": rv.UserID, "type": "User"},
	}
	b, _ := json.Marshal(payload)
	return b
}

func (f *FakeGitHub) repoJSON() map[string]any {
	return map[string]any{"id": 4242, "name": f.Repo, "full_name": f.Owner + "/" + f.Repo, "owner": map[string]any{"login": f.Owner}}
}

// NextID returns a fresh comment or review id.
func (f *FakeGitHub) NextID() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	return f.nextID
}
