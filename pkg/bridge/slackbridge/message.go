// Package slackbridge is Trinity's bridge on Slack (docs/DESIGN.md §11): it posts a
// decision as a Block Kit message with Approve and Deny buttons, and serves
// Slack's interactivity endpoint, where it verifies the request signature,
// maps the clicking Slack user to an approver and has the
// [bridge.Attestor] sign and store the answer. It answers Slack at once and
// leaves the calls to Slack's Web API that follow a click to the [Updater].
package slackbridge

import (
	"time"

	"context"
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/slack-go/slack"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/pkg/visible"
)

// Action ids of the two buttons, and the prefix of the id of the block
// that holds them. Slack asks for a new block id at each update of a
// message, so the id ends in a digest of what the message shows.
const (
	ActionApprove  = "approve"
	ActionDeny     = "deny"
	ActionsBlockID = "prod-write-answer"
)

// Slack's limits on a section's text and a header's.
const (
	maxSection = 3000
	maxHeader  = 150
)

// ButtonValue is what both buttons carry: the fingerprint and the id of the
// certainty record they answer.
func ButtonValue(fp, record string) string { return fp + " " + record }

// ParseButtonValue reads a button value back, strictly.
func ParseButtonValue(v string) (fp, record string, err error) {
	fp, record, ok := strings.Cut(v, " ")
	if !ok || store.CheckFingerprint(fp) != nil || !isRecordID(record) {
		return "", "", fmt.Errorf("button value is not a fingerprint and a record id")
	}
	return fp, record, nil
}

func isRecordID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

// section is a plain_text section: nothing the agent or the operator wrote
// is read as markup, mentions or links.
func section(lines []string) *slack.SectionBlock {
	return slack.NewSectionBlock(plain(truncate(strings.Join(lines, "\n"), maxSection)), nil, nil)
}

// sections shows lines in as many plain_text sections as they need, each
// within Slack's limit, split between lines (a diff is capped already:
// bridge.DiffMaxBytes).
func sections(lines []string) []slack.Block {
	var out []slack.Block
	var cur []string
	size := 0
	for _, l := range lines {
		n := len([]rune(l)) + 1
		if len(cur) > 0 && size+n > maxSection {
			out = append(out, section(cur))
			cur, size = nil, 0
		}
		cur = append(cur, l)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, section(cur))
	}
	return out
}

func truncate(s string, max int) string {
	const more = "\n… (truncated: see prod-write status)"
	if len([]rune(s)) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-len([]rune(more))]) + more
}

// Blocks is the decision message: the plan, the record, the answers so far
// and the gate's verdict, and the buttons while an answer can still matter.
func Blocks(v *bridge.View) []slack.Block {
	status := bridge.StatusLines(v)
	blocks := []slack.Block{
		slack.NewHeaderBlock(plain(truncate(bridge.Title(v), maxHeader))),
		section(bridge.PlanLines(v.Plan)),
		slack.NewDividerBlock(),
		section(bridge.RecordLines(v)),
	}
	for _, d := range v.Diffs {
		blocks = append(blocks, slack.NewDividerBlock())
		blocks = append(blocks, sections(bridge.DiffLines(d))...)
	}
	blocks = append(blocks, slack.NewDividerBlock(), section(bridge.UseLines(v)), slack.NewDividerBlock(), section(status))
	if page := bridge.PageLines(v); page != nil {
		blocks = append(blocks, section(page))
	}
	if v.Closed() {
		return blocks
	}
	value := ButtonValue(v.Plan.Fingerprint, v.RecordID)
	approve := slack.NewButtonBlockElement(ActionApprove, value, plain("Approve")).WithStyle(slack.StylePrimary).
		WithConfirm(slack.NewConfirmationBlockObject(plain("Approve this exact invocation?"),
			plain(truncate(fmt.Sprintf("You approve %s on %s, fingerprint %s, as described by record %.12s…. Your answer is signed in your name and lives %s; one run spends it.", visible.Text(v.Plan.Operation), visible.Word(v.Plan.Target), v.Plan.Fingerprint, v.RecordID, bridge.Duration(approval.DefaultAnswerTTL)), 300)),
			plain("Approve"), plain("Cancel")))
	deny := slack.NewButtonBlockElement(ActionDeny, value, plain("Deny")).WithStyle(slack.StyleDanger).
		WithConfirm(slack.NewConfirmationBlockObject(plain("Deny (veto) this plan?"),
			plain(bridge.VetoRule), plain("Deny"), plain("Cancel")))
	blocks = append(blocks,
		slack.NewActionBlock(fmt.Sprintf("%s.%x", ActionsBlockID, sha256.Sum256([]byte(strings.Join(status, "\n"))))[:len(ActionsBlockID)+13], approve, deny),
		slack.NewContextBlock("", plain(fmt.Sprintf("Only Slack users mapped to an approver in the trust policy can answer; the planner (%s) and the filer may deny, never approve.", v.Plan.Planner))),
	)
	return blocks
}

// fallback is the notification text of the message.
func fallback(v *bridge.View) string {
	return fmt.Sprintf("%s (%s)", bridge.Title(v), v.Plan.Fingerprint)
}

// Poster posts decisions to one channel with a bot token.
type Poster struct {
	API     *slack.Client
	Channel string
}

var _ bridge.Poster = (*Poster)(nil)

// Kind implements [bridge.Poster].
func (p *Poster) Kind() string { return bridge.KindSlack }

// Post implements [bridge.Poster] with chat.postMessage.
func (p *Poster) Post(ctx context.Context, v *bridge.View) (bridge.Post, error) {
	ch, ts, err := p.API.PostMessageContext(ctx, p.Channel, slack.MsgOptionText(fallback(v), true), slack.MsgOptionBlocks(Blocks(v)...))
	if err != nil {
		return bridge.Post{}, fmt.Errorf("chat.postMessage: %w", err)
	}
	return bridge.Post{Kind: bridge.KindSlack, Fingerprint: v.Plan.Fingerprint, Record: v.RecordID, Posted: v.Now,
		SlackChannel: ch, SlackTS: ts}, nil
}

// Withdrawn implements [bridge.Poster] with chat.update: the message shows
// the withdrawal and loses its buttons.
func (p *Poster) Withdrawn(ctx context.Context, post bridge.Post, v *bridge.View) error {
	return update(ctx, p.API, post.SlackChannel, post.SlackTS, v)
}

func update(ctx context.Context, api *slack.Client, channel, ts string, v *bridge.View) error {
	if _, _, _, err := api.UpdateMessageContext(ctx, channel, ts, slack.MsgOptionText(fallback(v), true), slack.MsgOptionBlocks(Blocks(v)...)); err != nil {
		return fmt.Errorf("chat.update: %w", err)
	}
	return nil
}

var _ bridge.Follower = (*Poster)(nil)

// escapeText escapes what Slack reads as markup in message text (its
// documented three: &, <, >), so that text a person wrote (a reason) shows
// as itself and can never mention anyone or link anywhere.
func escapeText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(visible.Text(s))
}

// noticeText is n as message text: mentions of the principals' Slack
// member ids (from the trust policy), then the escaped text.
func noticeText(n bridge.Notice) string {
	var b strings.Builder
	for _, pr := range n.Mention {
		if pr.Slack != "" {
			fmt.Fprintf(&b, "<@%s> ", pr.Slack)
		}
	}
	b.WriteString(escapeText(n.Text))
	return b.String()
}

// FollowUp implements [bridge.Follower]: a reply in the decision's thread
// (chat.postMessage with thread_ts); a final notice, or one that reopens
// the decision, also updates the message to v (which drops the buttons
// once the decision is closed, and shows them again when it is reopened).
func (p *Poster) FollowUp(ctx context.Context, post bridge.Post, v *bridge.View, n bridge.Notice) error {
	if _, _, err := p.API.PostMessageContext(ctx, post.SlackChannel, slack.MsgOptionText(noticeText(n), false), slack.MsgOptionTS(post.SlackTS)); err != nil {
		return fmt.Errorf("chat.postMessage: %w", err)
	}
	if n.Final || n.Reopened {
		return update(ctx, p.API, post.SlackChannel, post.SlackTS, v)
	}
	return nil
}

// Escalate implements [bridge.Follower]: the decision, buttons and all, is
// posted to channel to, and the original thread says where it went.
func (p *Poster) Escalate(ctx context.Context, post bridge.Post, v *bridge.View, to string, n bridge.Notice) (*bridge.Post, error) {
	blocks := append([]slack.Block{section([]string{n.Text})}, Blocks(v)...)
	ch, ts, err := p.API.PostMessageContext(ctx, to, slack.MsgOptionText(fallback(v), true), slack.MsgOptionBlocks(blocks...))
	if err != nil {
		return nil, fmt.Errorf("chat.postMessage to %s: %w", to, err)
	}
	note := bridge.Notice{Text: n.Text + " Posted again to " + to + "."}
	if _, _, err := p.API.PostMessageContext(ctx, post.SlackChannel, slack.MsgOptionText(noticeText(note), false), slack.MsgOptionTS(post.SlackTS)); err != nil {
		return nil, fmt.Errorf("chat.postMessage: %w", err)
	}
	return &bridge.Post{Kind: bridge.KindSlack, Fingerprint: v.Plan.Fingerprint, Record: v.RecordID, Posted: v.Now,
		SlackChannel: ch, SlackTS: ts}, nil
}

var _ bridge.Announcer = (*Poster)(nil)

// Announce implements [bridge.Announcer] with chat.postMessage: the notice
// as plain text (escaped), mentioning the principals' Slack member ids.
func (p *Poster) Announce(ctx context.Context, fp, record string, at time.Time, n bridge.Notice) (bridge.Post, error) {
	ch, ts, err := p.API.PostMessageContext(ctx, p.Channel, slack.MsgOptionText(noticeText(n), false))
	if err != nil {
		return bridge.Post{}, fmt.Errorf("chat.postMessage: %w", err)
	}
	return bridge.Post{Kind: bridge.KindSlack, Fingerprint: fp, Record: record, Posted: at, SlackChannel: ch, SlackTS: ts}, nil
}
