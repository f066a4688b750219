package slackbridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// MaxSkew is how far a request's timestamp may be from the bridge's clock,
// and a click's action timestamp from its request's: Slack's own five
// minutes. A captured request is useless after it.
const MaxSkew = 5 * time.Minute

// InteractionsPath is where bridge serve takes Slack's interaction
// requests, to [Handler]: the Request URL of the Slack app is
// https://HOST/slack/interactions.
const InteractionsPath = "/slack/interactions"

// maxBody bounds an interaction payload; Slack's carry the whole message.
const maxBody = 1 << 20

// Handler is the interactivity endpoint (Slack app: Interactivity & Shortcuts
// → Request URL).
//
// Every response is plain text saying what happened, for logs and tests;
// Slack ignores the body of a block_actions response. Status codes: 401 for
// a missing, bad or stale signature; 400 for a signed request that is not a
// well-formed click; 405 for another method; 200 otherwise, including
// refusals (the user sees those as an ephemeral reply).
//
// The handler never calls Slack's Web API: Slack shows the user an error
// when its request is not answered within three seconds, and the Web API
// can take longer than that. An answer is stored before the response; the
// message update and the ephemeral reply are queued on disk, also before
// the response, and the [Updater] delivers them after it.
type Handler struct {
	SigningSecret bridge.Secret
	Attestor      *bridge.Attestor
	// Updates delivers message updates and ephemeral replies after the
	// response; nil sends none.
	Updates *Updater
	// Team, when set, is the only workspace whose clicks count.
	Team string
	Log  *slog.Logger
}

func (h *Handler) reply(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintf(w, format+"\n", args...)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reply(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		h.reply(w, http.StatusRequestEntityTooLarge, "request body too large or unreadable")
		return
	}

	// 1. Slack's v0 signature over the timestamp and the raw body, and a
	// timestamp within five minutes. Nothing of the request is read before.
	sv, err := slack.NewSecretsVerifier(r.Header, h.SigningSecret.Reveal())
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		if errors.Is(err, slack.ErrExpiredTimestamp) {
			h.Log.Warn("slack: refused a stale request", "remote", r.RemoteAddr)
			h.reply(w, http.StatusUnauthorized, "stale request: its timestamp is more than five minutes away")
			return
		}
		h.Log.Warn("slack: refused a request with a missing or bad signature", "remote", r.RemoteAddr)
		h.reply(w, http.StatusUnauthorized, "invalid request signature")
		return
	}
	reqTS, err := strconv.ParseInt(r.Header.Get("X-Slack-Request-Timestamp"), 10, 64)
	if err != nil {
		h.reply(w, http.StatusUnauthorized, "invalid request timestamp")
		return
	}

	// 2. A well-formed click on one of our buttons.
	r.Body = io.NopCloser(bytes.NewReader(body))
	ic, err := slack.InteractionCallbackParse(r)
	if err != nil {
		h.reply(w, http.StatusBadRequest, "malformed interaction payload")
		return
	}
	if ic.Type != slack.InteractionTypeBlockActions {
		h.reply(w, http.StatusOK, "ignored: a %s interaction, not a button click", clip(string(ic.Type)))
		return
	}
	if len(ic.ActionCallback.BlockActions) != 1 || len(ic.ActionCallback.AttachmentActions) != 0 {
		h.reply(w, http.StatusBadRequest, "malformed interaction payload: want exactly one block action")
		return
	}
	act := ic.ActionCallback.BlockActions[0]
	if !strings.HasPrefix(act.BlockID, ActionsBlockID) || (act.ActionID != ActionApprove && act.ActionID != ActionDeny) {
		h.reply(w, http.StatusOK, "ignored: not a prod-write answer button")
		return
	}
	fp, record, err := ParseButtonValue(act.Value)
	if err != nil {
		h.reply(w, http.StatusBadRequest, "malformed interaction payload: %v", err)
		return
	}
	issued, err := parseActionTS(act.ActionTs)
	if err != nil {
		h.reply(w, http.StatusBadRequest, "malformed interaction payload: %v", err)
		return
	}
	// The answer is dated by the click (so that a retry signs to the same
	// record); the click must then be as fresh as the signed request.
	if d := issued.Sub(time.Unix(reqTS, 0)); d > MaxSkew || d < -MaxSkew {
		h.reply(w, http.StatusBadRequest, "stale action: its timestamp is more than five minutes from the request's")
		return
	}
	user, team := ic.User.ID, ic.Team.ID
	if team == "" {
		team = ic.User.TeamID
	}
	channel, msgTS := ic.Container.ChannelID, ic.Container.MessageTs
	if channel == "" {
		channel = ic.Channel.ID
	}
	if msgTS == "" {
		msgTS = ic.Message.Timestamp
	}

	// 3. The workspace, then the attestor: identity, separation of
	// duties, dedupe, sign, store.
	var res *bridge.Result
	if h.Team != "" && team != h.Team {
		err = refusal.New(refusal.PrincipalUnknown, "clicks from Slack workspace %s do not count; only %s's do", clip(team), h.Team).For("", fp)
	} else {
		res, err = h.Attestor.Answer(bridge.Request{
			Fingerprint: fp, Record: record, Verdict: act.ActionID,
			Channel: approval.Channel{Kind: bridge.KindSlack, SlackUser: user, SlackTeam: team, SlackActionTS: act.ActionTs},
			Issued:  issued,
		})
	}
	if ref, ok := refusal.As(err); ok {
		h.Log.Info("slack: answer not recorded", "fingerprint", fp, "slack_user", clip(user), "code", ref.Code, "reason", ref.Reason)
		h.queueReply(channel, user, fmt.Sprintf("Your %s was not recorded: %s", act.ActionID, ref.Reason))
		if ref.Code == refusal.Withdrawn {
			h.queueUpdate(channel, msgTS, fp, record)
		}
		h.reply(w, http.StatusOK, "refused (%s): %s", ref.Code, ref.Reason)
		return
	}
	if err != nil {
		h.Log.Error("slack: recording an answer failed", "fingerprint", fp, "error", err.Error())
		h.reply(w, http.StatusInternalServerError, "internal error: the answer was not recorded")
		return
	}
	what := "recorded"
	if res.Duplicate {
		what = "already recorded"
	}
	h.Log.Info("slack: answer "+what, "fingerprint", fp, "answer", res.ID, "approver", res.Approver, "verdict", res.Verdict, "slack_user", clip(user))
	h.queueUpdate(channel, msgTS, fp, record)
	h.reply(w, http.StatusOK, "%s: %s by %s (answer %s)", what, res.Verdict, res.Approver, res.ID)
}

// queueReply queues an ephemeral reply telling the clicking user, and only
// them, why nothing happened.
func (h *Handler) queueReply(channel, user, text string) {
	if h.Updates == nil || channel == "" || user == "" {
		return
	}
	if err := h.Updates.Reply(channel, user, text); err != nil {
		h.Log.Warn("slack: the ephemeral reply was not queued", "error", err.Error())
	}
}

// queueUpdate queues a rewrite of the decision message to show the answers
// and the gate. The answer is already stored: a failure here loses only
// this rewrite, and the next one shows everything.
func (h *Handler) queueUpdate(channel, ts, fp, record string) {
	if h.Updates == nil || channel == "" || ts == "" {
		return
	}
	if err := h.Updates.UpdateMessage(channel, ts, fp, record); err != nil {
		h.Log.Error("slack: the message update was not queued", "error", err.Error())
	}
}

// parseActionTS reads Slack's "1700000000.123456" (seconds, then
// microseconds) exactly: one click has one time.
func parseActionTS(s string) (time.Time, error) {
	sec, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) == 0 || len(frac) > 9 || len(sec) == 0 || len(sec) > 12 {
		return time.Time{}, fmt.Errorf("action_ts %q is not seconds.fraction", clip(s))
	}
	secs, err1 := strconv.ParseInt(sec, 10, 64)
	fr, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil || secs < 0 || fr < 0 {
		return time.Time{}, fmt.Errorf("action_ts %q is not seconds.fraction", clip(s))
	}
	for i := len(frac); i < 9; i++ {
		fr *= 10
	}
	return time.Unix(secs, fr).UTC(), nil
}

// clip bounds a request-supplied string before it is echoed or logged.
func clip(s string) string {
	q := strconv.Quote(s[:min(len(s), 64)])
	q = q[1 : len(q)-1]
	if len(s) > 64 {
		q += "…"
	}
	return q
}
