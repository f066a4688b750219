package bridgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"time"
)

// FakeGitHub is an httptest fake of the parts of GitHub's REST API the
// bridge uses (issues, issue comments, with pagination), for one
// repository, under the path prefix /api/v3/ as on GitHub Enterprise
// Server, so a client that builds absolute paths fails.
type FakeGitHub struct {
	*httptest.Server
	Owner, Repo, Token string
	// BotLogin authors what the token posts.
	BotLogin string

	mu     sync.Mutex
	issues map[int]*FakeIssue
	nextID int64
}

// FakeIssue is an issue or pull request of the fake.
type FakeIssue struct {
	Number      int
	Title, Body string
	State       string
	StateReason string
	Comments    []*FakeComment
}

// FakeComment is an issue comment of the fake.
type FakeComment struct {
	ID        int64
	Login     string
	Body      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// NewFakeGitHub starts a fake GitHub API for owner/repo that accepts token.
func NewFakeGitHub(owner, repo, token string) *FakeGitHub {
	f := &FakeGitHub{Owner: owner, Repo: repo, Token: token, BotLogin: "prod-write-bot", issues: map[int]*FakeIssue{}, nextID: 9000}
	mux := http.NewServeMux()
	prefix := "/api/v3/repos/" + owner + "/" + repo
	mux.HandleFunc("POST "+prefix+"/issues", f.createIssue)
	mux.HandleFunc("PATCH "+prefix+"/issues/{n}", f.editIssue)
	mux.HandleFunc("GET "+prefix+"/issues/{n}/comments", f.listComments)
	mux.HandleFunc("POST "+prefix+"/issues/{n}/comments", f.createComment)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.Token {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"message":"Bad credentials"}`)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	return f
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

// AddComment adds a comment by login on issue number, made at created and,
// if edited, changed a minute later. It returns the comment's id.
func (f *FakeGitHub) AddComment(number int, login, body string, created time.Time, edited bool) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issues[number]
	if is == nil {
		return 0
	}
	f.nextID++
	c := &FakeComment{ID: f.nextID, Login: login, Body: body, CreatedAt: created.UTC().Truncate(time.Second), UpdatedAt: created.UTC().Truncate(time.Second)}
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
	return map[string]any{"id": c.ID, "body": c.Body, "user": map[string]any{"login": c.Login},
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
	c := &FakeComment{ID: f.nextID, Login: f.BotLogin, Body: req.Body, CreatedAt: now, UpdatedAt: now}
	is.Comments = append(is.Comments, c)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(f.commentJSON(is, c))
}

// listComments pages like GitHub: per_page (default 30), page (from 1),
// and a Link header with rel="next" while more remain.
func (f *FakeGitHub) listComments(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	is := f.issue(w, r)
	if is == nil {
		return
	}
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if per <= 0 || per > 100 {
		per = 30
	}
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	if page <= 0 {
		page = 1
	}
	start, end := (page-1)*per, page*per
	out := []map[string]any{}
	for i, c := range is.Comments {
		if i >= start && i < end {
			out = append(out, f.commentJSON(is, c))
		}
	}
	if end < len(is.Comments) {
		w.Header().Set("Link", fmt.Sprintf(`<%s%s?per_page=%d&page=%d>; rel="next"`, f.URL, r.URL.Path, per, page+1))
	}
	_ = json.NewEncoder(w).Encode(out)
}
