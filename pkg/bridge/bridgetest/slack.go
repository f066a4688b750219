package bridgetest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"
)

// FakeSlack is slack-go's slacktest server with chat.postMessage,
// chat.update and chat.postEphemeral handlers that record each call and
// check the bot token. [FakeSlack.SetDelay] makes it slow and
// [FakeSlack.FailNext] makes it fail, as Slack's Web API sometimes is.
type FakeSlack struct {
	*slacktest.Server
	Token string

	mu    sync.Mutex
	calls []Call
	seq   int
	delay time.Duration
	fail  int
	// quit ends the delays of calls in flight when the fake stops.
	quit     chan struct{}
	quitOnce sync.Once
}

// Call is one recorded Web API call.
type Call struct {
	Method string
	Values url.Values
	// TS is the message timestamp the fake answered with.
	TS string
}

// Blocks decodes the call's blocks.
func (c Call) Blocks() slack.Blocks {
	var b slack.Blocks
	_ = json.Unmarshal([]byte(c.Values.Get("blocks")), &b)
	return b
}

// ChannelID is the id the fake gives every channel named by name.
const ChannelID = "C0DECISION"

// NewFakeSlack starts a fake Slack Web API that accepts token.
func NewFakeSlack(token string) *FakeSlack {
	f := &FakeSlack{Token: token, quit: make(chan struct{})}
	f.Server = slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/chat.postMessage", f.handle("chat.postMessage"))
		c.Handle("/chat.update", f.handle("chat.update"))
		c.Handle("/chat.postEphemeral", f.handle("chat.postEphemeral"))
	})
	f.Start()
	return f
}

// APIURL is the URL to give slack.OptionAPIURL or bridge.slack_api.
func (f *FakeSlack) APIURL() string { return f.GetAPIURL() }

// Stop ends the delays of calls in flight, then stops the server.
func (f *FakeSlack) Stop() {
	f.quitOnce.Do(func() { close(f.quit) })
	f.Server.Stop()
}

// SetDelay makes every later Web API call wait d before it is answered (and
// recorded): a slow Slack. A call whose client gives up first is not
// recorded.
func (f *FakeSlack) SetDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// FailNext makes the next n Web API calls fail with HTTP 503, recording
// nothing.
func (f *FakeSlack) FailNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = n
}

func (f *FakeSlack) handle(method string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		values, err := url.ParseQuery(string(body))
		f.mu.Lock()
		delay, fail := f.delay, f.fail > 0
		if fail {
			f.fail--
		}
		f.mu.Unlock()
		if delay > 0 {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			case <-f.quit:
				return
			}
		}
		if fail {
			http.Error(w, "service unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			fmt.Fprint(w, `{"ok":false,"error":"invalid_form_data"}`)
			return
		}
		token := values.Get("token")
		if auth := r.Header.Get("Authorization"); token == "" && strings.HasPrefix(auth, "Bearer ") {
			token = strings.TrimPrefix(auth, "Bearer ")
		}
		if token != f.Token {
			fmt.Fprint(w, `{"ok":false,"error":"invalid_auth"}`)
			return
		}
		values.Del("token")
		f.mu.Lock()
		f.seq++
		ts := fmt.Sprintf("%d.%06d", time.Now().Unix(), f.seq)
		if method == "chat.update" {
			ts = values.Get("ts")
		}
		f.calls = append(f.calls, Call{Method: method, Values: values, TS: ts})
		f.mu.Unlock()
		channel := values.Get("channel")
		if strings.HasPrefix(channel, "#") {
			channel = ChannelID
		}
		resp := map[string]any{"ok": true, "channel": channel}
		switch method {
		case "chat.postMessage":
			resp["ts"] = ts
		case "chat.update":
			resp["ts"] = ts
		case "chat.postEphemeral":
			resp["message_ts"] = ts
		}
		_ = json.NewEncoder(w).Encode(resp)
	}
}

// Calls returns the recorded calls of method ("" for all).
func (f *FakeSlack) Calls(method string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// ButtonValue finds the value of the button actionID in blocks.
func ButtonValue(blocks slack.Blocks, actionID string) (string, bool) {
	_, v, ok := FindButton(blocks, actionID)
	return v, ok
}

// FindButton finds the button actionID in blocks: the id of its block and
// its value.
func FindButton(blocks slack.Blocks, actionID string) (blockID, value string, ok bool) {
	for _, b := range blocks.BlockSet {
		ab, ok := b.(*slack.ActionBlock)
		if !ok || ab.Elements == nil {
			continue
		}
		for _, e := range ab.Elements.ElementSet {
			if btn, ok := e.(*slack.ButtonBlockElement); ok && btn.ActionID == actionID {
				return ab.BlockID, btn.Value, true
			}
		}
	}
	return "", "", false
}

// Click is one button click as Slack reports it.
type Click struct {
	User, Team       string
	Channel, Message string // channel id and message ts of the decision
	BlockID          string
	ActionID, Value  string
	ActionTS         string
}

// ActionTS formats t as Slack's action_ts.
func ActionTS(t time.Time) string {
	return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000)
}

// Payload is the block_actions interaction payload Slack sends for c.
func (c Click) Payload() []byte {
	p := map[string]any{
		"type":         "block_actions",
		"user":         map[string]any{"id": c.User, "username": strings.ToLower(c.User), "name": strings.ToLower(c.User), "team_id": c.Team},
		"api_app_id":   "A0PRODWRITE",
		"token":        "deprecated-verification-token",
		"container":    map[string]any{"type": "message", "message_ts": c.Message, "channel_id": c.Channel, "is_ephemeral": false},
		"trigger_id":   "1234.5678.abcdef",
		"team":         map[string]any{"id": c.Team, "domain": "example"},
		"channel":      map[string]any{"id": c.Channel, "name": "prod-decisions"},
		"message":      map[string]any{"type": "message", "ts": c.Message, "text": "prod-write decision"},
		"state":        map[string]any{"values": map[string]any{}},
		"response_url": "https://hooks.slack.invalid/actions/T0/1/x",
		"actions": []map[string]any{{
			"action_id": c.ActionID, "block_id": c.BlockID, "value": c.Value, "type": "button",
			"text": map[string]any{"type": "plain_text", "text": c.ActionID}, "action_ts": c.ActionTS,
		}},
	}
	b, _ := json.Marshal(p)
	return b
}

// SignRequest returns the form body of an interaction request carrying payload and
// its headers, signed with secret at ts the way Slack signs (v0: HMAC-SHA256
// over "v0:TIMESTAMP:BODY").
func SignRequest(secret string, ts time.Time, payload []byte) (body string, header http.Header) {
	body = url.Values{"payload": {string(payload)}}.Encode()
	stamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:%s", stamp, body)
	header = http.Header{}
	header.Set("Content-Type", "application/x-www-form-urlencoded")
	header.Set("X-Slack-Request-Timestamp", stamp)
	header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	return body, header
}

// Post sends a signed interaction request to url and returns the status
// and body.
func Post(client *http.Client, url, body string, header http.Header) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header = header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
