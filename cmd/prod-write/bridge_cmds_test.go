package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
)

// Custom commands of the bridge_*.txtar scripts. The fakes run inside the
// test process, so they outlive the commands of one script and are stopped
// when it ends.

type bridgeFakes struct {
	slack  *bridgetest.FakeSlack
	github *bridgetest.FakeGitHub
	// lastClick is the last request slackclick sent, for -again.
	lastClick struct {
		body   string
		header http.Header
	}
	// lastHook is the last webhook fakegithub hook delivered, for -again.
	lastHook struct {
		payload                 []byte
		event, delivery, secret string
	}
	hooks int
}

var (
	fakesMu sync.Mutex
	fakes   = map[*testscript.TestScript]*bridgeFakes{}
)

func fakesOf(ts *testscript.TestScript) *bridgeFakes {
	fakesMu.Lock()
	defer fakesMu.Unlock()
	f := fakes[ts]
	if f == nil {
		f = &bridgeFakes{}
		fakes[ts] = f
		ts.Defer(func() {
			fakesMu.Lock()
			defer fakesMu.Unlock()
			if f.slack != nil {
				f.slack.Stop()
			}
			if f.github != nil {
				f.github.Close()
			}
			delete(fakes, ts)
		})
	}
	return f
}

// freeAddr reserves a loopback address for bridge serve to listen on.
func freeAddr(ts *testscript.TestScript) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	addr := ln.Addr().String()
	ts.Check(ln.Close())
	return addr
}

// cmdFakeSlack drives a fake Slack Web API (slack-go's slacktest server
// with recording handlers):
//
//	fakeslack start        start it; set $SLACK_API (its URL) and
//	                       $BRIDGE_LISTEN (a free address for bridge serve);
//	                       it accepts the bot token $PROD_WRITE_SLACK_BOT_TOKEN
//	fakeslack METHOD N     check that METHOD (chat.postMessage, chat.update,
//	                       chat.postEphemeral) was called N times, and print
//	                       the last call's text and blocks to stdout; it
//	                       waits up to 5 s for the count, since the bridge
//	                       updates Slack after answering a click
func cmdFakeSlack(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: fakeslack start | fakeslack METHOD N")
	}
	f := fakesOf(ts)
	if args[0] == "start" {
		token := ts.Getenv("PROD_WRITE_SLACK_BOT_TOKEN")
		if token == "" {
			ts.Fatalf("fakeslack start: set PROD_WRITE_SLACK_BOT_TOKEN first")
		}
		f.slack = bridgetest.NewFakeSlack(token)
		ts.Setenv("SLACK_API", f.slack.APIURL())
		ts.Setenv("BRIDGE_LISTEN", freeAddr(ts))
		return
	}
	if f.slack == nil || len(args) != 2 {
		ts.Fatalf("usage: fakeslack start | fakeslack METHOD N")
	}
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	calls := f.slack.Calls(args[0])
	for deadline := time.Now().Add(5 * time.Second); len(calls) < want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		calls = f.slack.Calls(args[0])
	}
	if len(calls) != want {
		ts.Fatalf("%s called %d times, want %d", args[0], len(calls), want)
	}
	if len(calls) > 0 {
		last := calls[len(calls)-1]
		fmt.Fprintf(ts.Stdout(), "channel: %s\nts: %s\nthread_ts: %s\nuser: %s\ntext: %s\nblocks: %s\n", last.Values.Get("channel"), last.TS,
			last.Values.Get("thread_ts"), last.Values.Get("user"), last.Values.Get("text"), last.Values.Get("blocks"))
	}
}

// cmdSlackClick clicks a button of the last decision posted to the fake
// Slack, as Slack would deliver it to bridge serve at $BRIDGE_LISTEN:
// a block_actions payload, signed with $PROD_WRITE_SLACK_SIGNING_SECRET.
// It prints the HTTP status and the response body:
//
//	slackclick [-again] [-stale] [-secret S] USER approve|deny
//
// -again sends the previous request's very bytes again (a replay); -stale
// signs with a timestamp six minutes old; -secret signs with another secret.
func cmdSlackClick(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("usage: slackclick [-again] [-stale] [-secret S] USER approve|deny")
	}
	f := fakesOf(ts)
	secret, at, again := ts.Getenv("PROD_WRITE_SLACK_SIGNING_SECRET"), time.Now(), false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-again":
			again = true
		case "-stale":
			at = at.Add(-6 * time.Minute)
		case "-secret":
			if len(args) < 2 {
				ts.Fatalf("slackclick: -secret needs a value")
			}
			secret, args = args[1], args[1:]
		default:
			ts.Fatalf("slackclick: unknown flag %s", args[0])
		}
		args = args[1:]
	}
	var body string
	var header http.Header
	if again {
		body, header = f.lastClick.body, f.lastClick.header
		if body == "" {
			ts.Fatalf("slackclick -again: no click to send again")
		}
	} else {
		if len(args) != 2 || f.slack == nil {
			ts.Fatalf("usage: slackclick [-again] [-stale] [-secret S] USER approve|deny (after fakeslack start)")
		}
		posted := f.slack.Calls("chat.postMessage")
		if len(posted) == 0 {
			ts.Fatalf("slackclick: no decision was posted")
		}
		block, value, ok := bridgetest.FindButton(posted[len(posted)-1].Blocks(), args[1])
		if !ok {
			ts.Fatalf("slackclick: the last decision has no %s button", args[1])
		}
		last := posted[len(posted)-1]
		ch, msg := last.Values.Get("channel"), last.TS
		if strings.HasPrefix(ch, "#") {
			ch = bridgetest.ChannelID
		}
		c := bridgetest.Click{User: args[0], Team: "T0DEMO", Channel: ch, Message: msg, BlockID: block,
			ActionID: args[1], Value: value, ActionTS: bridgetest.ActionTS(at)}
		body, header = bridgetest.SignRequest(secret, at, c.Payload())
		f.lastClick.body, f.lastClick.header = body, header
	}
	url := "http://" + ts.Getenv("BRIDGE_LISTEN") + "/slack/interactions"
	client := &http.Client{Timeout: 10 * time.Second}
	var code int
	var resp string
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; {
		code, resp, err = bridgetest.Post(client, url, body, header)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // bridge serve is still starting
	}
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "%d\n%s", code, resp)
}

// cmdFakeGitHub drives a fake GitHub REST API for acme/decisions:
//
//	fakegithub start                       start it; set $GITHUB_API, and
//	                                       $BRIDGE_LISTEN (a free address for
//	                                       bridge serve) unless set; it
//	                                       accepts $PROD_WRITE_GITHUB_TOKEN
//	fakegithub comment ISSUE LOGIN[@ID] TEXT…
//	                                       add a comment by LOGIN (with user
//	                                       id ID, else the login's usual one)
//	fakegithub issue ISSUE                 print the issue, its state and
//	                                       its comments
//	fakegithub wait ISSUE N [STATE [REASON]]
//	                                       wait until the issue has N comments
//	                                       (and is in STATE, for the REASON)
//	fakegithub hook [-badsig] SECRETFILE issue_comment ISSUE LOGIN[@ID] TEXT…
//	fakegithub hook [-badsig] SECRETFILE pull_request_review PR LOGIN[@ID] STATE TEXT…
//	fakegithub hook [-badsig] SECRETFILE EVENT ISSUE LOGIN[@ID] TEXT…
//	                                       deliver a webhook for a new comment
//	                                       (added to the issue unless
//	                                       -badsig) or review to
//	                                       bridge serve at $BRIDGE_LISTEN,
//	                                       signed with the secret in
//	                                       SECRETFILE (-badsig: with another);
//	                                       print the status and the body
//	fakegithub hook -again                 deliver the last delivery again
func cmdFakeGitHub(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: fakegithub start | comment ISSUE LOGIN TEXT… | issue ISSUE | wait ISSUE N | hook …")
	}
	f := fakesOf(ts)
	if args[0] == "start" {
		f.github = bridgetest.NewFakeGitHub("acme", "decisions", ts.Getenv("PROD_WRITE_GITHUB_TOKEN"))
		ts.Setenv("GITHUB_API", f.github.APIURL())
		if ts.Getenv("BRIDGE_LISTEN") == "" {
			ts.Setenv("BRIDGE_LISTEN", freeAddr(ts))
		}
		return
	}
	if f.github == nil || len(args) < 2 {
		ts.Fatalf("fakegithub: start it first")
	}
	if args[0] == "hook" {
		fakeGitHubHook(ts, f, args[1:])
		return
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	switch args[0] {
	case "comment":
		if len(args) < 4 {
			ts.Fatalf("usage: fakegithub comment ISSUE LOGIN[@ID] TEXT…")
		}
		login, id := githubAccount(ts, args[2])
		if f.github.AddCommentBy(n, login, id, strings.Join(args[3:], " "), time.Now(), false) == 0 {
			ts.Fatalf("fakegithub: no issue %d", n)
		}
	case "issue":
		is := f.github.Issue(n)
		if is == nil {
			ts.Fatalf("fakegithub: no issue %d", n)
		}
		fmt.Fprintf(ts.Stdout(), "title: %s\nstate: %s %s\n%s\n", is.Title, is.State, is.StateReason, is.Body)
		for _, c := range is.Comments {
			fmt.Fprintf(ts.Stdout(), "comment %d by %s: %s\n", c.ID, c.Login, c.Body)
		}
	case "wait":
		if len(args) < 3 || len(args) > 5 {
			ts.Fatalf("usage: fakegithub wait ISSUE N [STATE [REASON]]")
		}
		want, err := strconv.Atoi(args[2])
		ts.Check(err)
		state := strings.Join(args[3:], " ")
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			is := f.github.Issue(n)
			if is != nil && len(is.Comments) >= want && (state == "" || strings.TrimSpace(is.State+" "+is.StateReason) == state) {
				return
			}
			if time.Now().After(deadline) {
				ts.Fatalf("fakegithub: issue %d did not reach %d comments %s", n, want, state)
			}
		}
	default:
		ts.Fatalf("fakegithub: unknown subcommand %q", args[0])
	}
}

// githubAccount reads LOGIN or LOGIN@ID.
func githubAccount(ts *testscript.TestScript, s string) (string, int64) {
	login, idText, ok := strings.Cut(s, "@")
	if !ok {
		return login, bridgetest.GitHubUserID(login)
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	ts.Check(err)
	return login, id
}

// fakeGitHubHook is fakegithub hook.
func fakeGitHubHook(ts *testscript.TestScript, f *bridgeFakes, args []string) {
	usage := "usage: fakegithub hook [-badsig] SECRETFILE EVENT NUMBER LOGIN[@ID] [STATE] TEXT… | hook -again"
	var payload []byte
	var event, delivery, secret string
	if len(args) == 1 && args[0] == "-again" {
		if f.lastHook.payload == nil {
			ts.Fatalf("fakegithub hook -again: nothing was delivered")
		}
		payload, event, delivery, secret = f.lastHook.payload, f.lastHook.event, f.lastHook.delivery, f.lastHook.secret
	} else {
		badSig := len(args) > 0 && args[0] == "-badsig"
		if badSig {
			args = args[1:]
		}
		if len(args) < 5 {
			ts.Fatalf("%s", usage)
		}
		secret = strings.TrimSpace(ts.ReadFile(args[0]))
		if badSig {
			secret = "not-the-webhook-secret"
		}
		event = args[1]
		n, err := strconv.Atoi(args[2])
		ts.Check(err)
		login, id := githubAccount(ts, args[3])
		now := time.Now().UTC().Truncate(time.Second)
		if event == "pull_request_review" {
			if len(args) < 6 {
				ts.Fatalf("%s", usage)
			}
			rv := bridgetest.FakeReview{ID: f.github.NextID(), Login: login, UserID: id, State: args[4], Body: strings.Join(args[5:], " "), SubmittedAt: now}
			payload = f.github.ReviewPayload("submitted", n, rv)
		} else {
			text := strings.Join(args[4:], " ")
			// A forged delivery (-badsig) is about a comment that
			// does not exist, so polling cannot find it either.
			cid := f.github.NextID()
			if !badSig {
				if cid = f.github.AddCommentBy(n, login, id, text, now, false); cid == 0 {
					ts.Fatalf("fakegithub: no issue %d", n)
				}
			}
			payload = f.github.IssueCommentPayload("created", n, false, bridgetest.FakeComment{ID: cid, Login: login, UserID: id, Body: text, CreatedAt: now, UpdatedAt: now})
		}
		f.hooks++
		delivery = fmt.Sprintf("00000000-0000-4000-8000-%012d", f.hooks)
		f.lastHook.payload, f.lastHook.event, f.lastHook.delivery, f.lastHook.secret = payload, event, delivery, secret
	}
	url := "http://" + ts.Getenv("BRIDGE_LISTEN") + "/github/webhook"
	client := &http.Client{Timeout: 15 * time.Second}
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err = client.Do(bridgetest.GitHubWebhook(url, secret, event, delivery, payload))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // bridge serve is still starting
	}
	ts.Check(err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "status: %d\n%s", resp.StatusCode, body)
}

// cmdAppendEnv appends file SRC to DST with $VARIABLES expanded from the
// script's environment, for configuration that names a fake's address:
//
//	appendenv bridge.toml prod-write.toml
func cmdAppendEnv(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: appendenv SRC DST")
	}
	data := os.Expand(ts.ReadFile(args[0]), ts.Getenv)
	f, err := os.OpenFile(ts.MkAbs(args[1]), os.O_WRONLY|os.O_APPEND, 0)
	ts.Check(err)
	_, err = f.WriteString("\n" + data)
	ts.Check(err)
	ts.Check(f.Close())
}
