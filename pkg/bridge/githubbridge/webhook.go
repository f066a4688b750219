package githubbridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/google/go-github/v66/github"

	"github.com/prod-write/prod-write/pkg/bridge"
)

// WebhookPath is where the bridge's listener takes GitHub's webhook
// deliveries: the webhook's Payload URL is https://HOST/github/webhook.
const WebhookPath = "/github/webhook"

// MaxWebhookBody bounds a delivery. GitHub caps payloads at 25 MB, but an
// issue_comment or pull_request_review payload is the comment or review
// (at most 65536 characters), the issue or pull request and the
// repository: a larger body is refused (413) and its command is still
// found by polling.
const MaxWebhookBody = 1 << 20

// Webhook is GitHub's webhook endpoint, the real-time path: it takes the
// issue_comment and pull_request_review events of the decision
// repository and judges them with Poller's judgement, so a command is
// recorded, acknowledged and refused exactly as when polled, and the two
// never answer one command twice.
//
// Status codes: 401 for a missing or bad X-Hub-Signature-256, before
// anything of the body is parsed; 413 for a body over [MaxWebhookBody];
// 415 for a payload that is not JSON; 405 for a method other than POST;
// 204 for an event, an action or a repository that is not a decision's
// (including ping), or a comment that is no command; 200 with a line
// saying what happened otherwise; 500 when an answer could not be stored,
// so GitHub shows the delivery failed and it can be redelivered.
//
// Deliveries carry no timestamp, so a captured one can be sent again at
// any time: it is idempotent. The answer it makes is a function of the
// comment or review alone (the store keeps it once), a delivery already
// handled (same X-GitHub-Delivery and body) is answered from memory, and an
// answer expires an hour after its comment, whenever it is replayed.
type Webhook struct {
	// Secret is the webhook's secret (github_webhook_secret_file).
	Secret bridge.Secret
	Poller *Poller

	mu   sync.Mutex
	done map[string]string // delivery id and body digest → the reply
	ring []string
}

// webhookMemory is how many handled deliveries a Webhook remembers.
const webhookMemory = 4096

func (h *Webhook) reply(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	if code != http.StatusNoContent {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// verify reports whether sig is "sha256=" and the hex HMAC-SHA256 of body
// under the secret, checked by go-github's ValidateSignature (constant
// time). Only SHA-256: go-github takes sha1= and sha512= too, and a sha1=
// signature is what a downgrade would send.
func (h *Webhook) verify(sig string, body []byte) bool {
	if h.Secret.Empty() || !strings.HasPrefix(sig, "sha256=") {
		return false
	}
	return github.ValidateSignature(sig, body, []byte(h.Secret.Reveal())) == nil
}

// ServeHTTP implements http.Handler.
func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reply(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxWebhookBody))
	if err != nil {
		h.reply(w, http.StatusRequestEntityTooLarge, "request body too large or unreadable")
		return
	}
	// Only GitHub, holding the secret, can sign a body: nothing of it is
	// read before this. (The X-GitHub-* headers are not signed, so they
	// are trusted for nothing but choosing how to parse the body.)
	if !h.verify(r.Header.Get("X-Hub-Signature-256"), body) {
		h.Poller.Log.Warn("github: webhook delivery with a missing or bad signature", "delivery", r.Header.Get("X-GitHub-Delivery"), "remote", r.RemoteAddr)
		h.reply(w, http.StatusUnauthorized, "bad signature")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		h.reply(w, http.StatusUnsupportedMediaType, "set the webhook's content type to application/json")
		return
	}
	event, delivery := r.Header.Get("X-GitHub-Event"), r.Header.Get("X-GitHub-Delivery")
	if event != "issue_comment" && event != "pull_request_review" {
		h.reply(w, http.StatusNoContent, "")
		return
	}
	sum := sha256.Sum256(body)
	key := delivery + " " + hex.EncodeToString(sum[:])
	h.mu.Lock()
	prev, seen := h.done[key]
	h.mu.Unlock()
	if seen {
		h.reply(w, http.StatusOK, "delivery already handled: %s", prev)
		return
	}
	parsed, err := github.ParseWebHook(event, body)
	if err != nil {
		h.reply(w, http.StatusBadRequest, "the %s payload does not parse", event)
		return
	}
	code, msg := h.handle(r.Context(), parsed)
	if code < 300 {
		h.remember(key, msg)
	}
	h.reply(w, code, "%s", msg)
}

// handle judges one delivery's comment or review.
func (h *Webhook) handle(ctx context.Context, parsed any) (int, string) {
	p := h.Poller
	var it item
	var repo *github.Repository
	var action string
	switch ev := parsed.(type) {
	case *github.IssueCommentEvent:
		repo, action = ev.GetRepo(), ev.GetAction()
		if ev.Comment == nil || ev.Issue == nil {
			return http.StatusNoContent, ""
		}
		it = commentItem(ev.GetIssue().GetNumber(), ev.Comment)
	case *github.PullRequestReviewEvent:
		repo, action = ev.GetRepo(), ev.GetAction()
		if ev.Review == nil || ev.PullRequest == nil {
			return http.StatusNoContent, ""
		}
		it = reviewItem(ev.GetPullRequest().GetNumber(), ev.Review)
	default:
		return http.StatusNoContent, ""
	}
	if !strings.EqualFold(repo.GetFullName(), p.Owner+"/"+p.Repo) || it.id == 0 || it.number == 0 {
		return http.StatusNoContent, ""
	}
	if _, _, _, ok := ParseCommand(it.body); !ok {
		return http.StatusNoContent, ""
	}
	switch action {
	case "created", "submitted":
	case "edited":
		// An edited comment or review never counts (see the package
		// comment); the poller will see the same for a comment.
		it.edited = true
	default:
		return http.StatusNoContent, ""
	}
	byIssue, err := p.decisions()
	if err != nil {
		return http.StatusInternalServerError, "reading where decisions were posted failed"
	}
	posts := byIssue[it.number]
	if len(posts) == 0 {
		return http.StatusNoContent, ""
	}
	var n Counts
	out, err := p.judge(ctx, it, posts, &n)
	if err != nil {
		p.Log.Warn("github: webhook answer not stored", "error", bridge.Redact(err.Error(), p.Token))
		return http.StatusInternalServerError, "the answer could not be stored; redeliver"
	}
	return http.StatusOK, fmt.Sprintf("%s: %s %d", out, it.what(), it.id)
}

// remember keeps a handled delivery's reply, forgetting the oldest past
// webhookMemory.
func (h *Webhook) remember(key, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == nil {
		h.done = map[string]string{}
	}
	if _, ok := h.done[key]; ok {
		return
	}
	h.done[key] = msg
	h.ring = append(h.ring, key)
	if len(h.ring) > webhookMemory {
		delete(h.done, h.ring[0])
		h.ring = h.ring[1:]
	}
}
