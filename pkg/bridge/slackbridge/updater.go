package slackbridge

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/slack-go/slack"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
)

// Defaults of the [Updater]'s bounds.
const (
	DefaultCallTimeout = 10 * time.Second
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 5 * time.Minute
	DefaultMaxAttempts = 20
	DefaultMaxAge      = 24 * time.Hour
)

// Updater tells Slack, after the interactions endpoint has answered, what
// a click did: it rewrites the decision message (chat.update) and sends the
// clicking user an ephemeral reply (chat.postEphemeral). Slack gives the
// endpoint three seconds and shows the user an error after them, while its
// Web API can take longer than that; so the endpoint only queues, and the
// updater delivers.
//
// Each pending delivery is a file in the updater's directory, written with
// [durable.WriteFile] before the endpoint answers and removed once Slack
// has taken it: a delivery pending when the process stops is made on the
// next start. A failed call is retried with exponential backoff, at most
// MaxAttempts times and for at most MaxAge; Slack's Retry-After is
// honoured. Deliveries are made at least once: a crash between Slack's
// answer and the removal of the file repeats one.
//
// An update names the message and the decision, not what to show: the view
// is described from the store when it is delivered, so the message shows the
// decision as it stands then, and the pending updates of one message
// coalesce into one file. The directory is not trusted for anything the
// gate decides; like the ledger it says only where to write.
//
// Deliveries are made one at a time, in the order they fall due, so that
// an older view of a message never lands after a newer one.
type Updater struct {
	dir     string
	api     *slack.Client
	src     bridge.Source
	log     *slog.Logger
	secrets []bridge.Secret

	// Now is the clock; CallTimeout bounds each call to Slack; a failed
	// call is retried after MinBackoff, doubling up to MaxBackoff, until
	// MaxAttempts calls failed or the delivery is MaxAge old. Set them
	// before Run; zero means the Default.
	Now         func() time.Time
	CallTimeout time.Duration
	MinBackoff  time.Duration
	MaxBackoff  time.Duration
	MaxAttempts int
	MaxAge      time.Duration

	mu sync.Mutex
	// due is when each known pending delivery (by file name) is next tried.
	due  map[string]time.Time
	kick chan struct{}
}

// NewUpdater returns an updater keeping its pending deliveries in dir,
// calling Slack through api, and describing decisions from src. secrets are
// scrubbed from the errors it logs.
func NewUpdater(dir string, api *slack.Client, src bridge.Source, log *slog.Logger, secrets ...bridge.Secret) *Updater {
	return &Updater{dir: dir, api: api, src: src, log: log, secrets: secrets,
		due: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

// Dir is where the pending deliveries are kept.
func (u *Updater) Dir() string { return u.dir }

const (
	kindUpdate = "update"
	kindReply  = "reply"
)

// delivery is one pending call to Slack, as kept on disk.
type delivery struct {
	Kind    string `json:"kind"`
	Channel string `json:"channel"`
	// An update: the message, and the decision it shows.
	TS          string `json:"ts,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Record      string `json:"record,omitempty"`
	// A reply: to whom, and what.
	User string `json:"user,omitempty"`
	Text string `json:"text,omitempty"`

	Queued   time.Time `json:"queued"`
	Attempts int       `json:"attempts"`
	// Nonce tells this queuing from a later one of the same update, so
	// that a delivery never removes an update queued while it was made.
	Nonce string `json:"nonce"`
}

func (d *delivery) check() error {
	switch {
	case d.Kind == kindUpdate && d.Channel != "" && d.TS != "" && store.CheckFingerprint(d.Fingerprint) == nil && isRecordID(d.Record):
	case d.Kind == kindReply && d.Channel != "" && d.User != "" && d.Text != "":
	default:
		return fmt.Errorf("not a pending Slack update or reply")
	}
	return nil
}

// UpdateMessage queues a rewrite of the decision message at channel and ts
// to show record of plan fp as it will stand when delivered. It returns once
// the update is on disk.
func (u *Updater) UpdateMessage(channel, ts, fp, record string) error {
	sum := sha256.Sum256([]byte(channel + "\x00" + ts))
	return u.queue("update-"+hex.EncodeToString(sum[:12])+".json",
		&delivery{Kind: kindUpdate, Channel: channel, TS: ts, Fingerprint: fp, Record: record})
}

// Reply queues an ephemeral reply to user in channel. It returns once the
// reply is on disk.
func (u *Updater) Reply(channel, user, text string) error {
	return u.queue("reply-"+nonce()+".json", &delivery{Kind: kindReply, Channel: channel, User: user, Text: text})
}

func nonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (u *Updater) queue(name string, d *delivery) error {
	d.Queued, d.Nonce = u.now(), nonce()
	if err := d.check(); err != nil {
		return err
	}
	if err := durable.MkdirAll(u.dir, 0o700); err != nil {
		return fmt.Errorf("queuing a Slack %s: %w", d.Kind, err)
	}
	if err := u.private(); err != nil {
		return fmt.Errorf("queuing a Slack %s: %w", d.Kind, err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.write(name, d); err != nil {
		return fmt.Errorf("queuing a Slack %s: %w", d.Kind, err)
	}
	u.due[name] = time.Time{} // now
	select {
	case u.kick <- struct{}{}:
	default:
	}
	return nil
}

func (u *Updater) write(name string, d *delivery) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(u.dir, name), append(data, '\n'), 0o600)
}

func (u *Updater) read(name string) (*delivery, error) {
	if err := u.private(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(u.dir, name))
	if err != nil {
		return nil, err
	}
	var d delivery
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(u.dir, name), err)
	}
	if err := d.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(u.dir, name), err)
	}
	return &d, nil
}

// Pending returns how many deliveries wait on disk.
func (u *Updater) Pending() (int, error) {
	names, err := u.list()
	return len(names), err
}

// private checks that only this process's account can add or change a
// pending delivery: whatever the outbox holds is posted with the bot's
// token, and a reply may say anything to anyone. The directory must be a
// directory (not a link to one) owned by this account, with no group or
// other write permission. One that does not exist yet is private: queue
// creates it 0700.
func (u *Updater) private() error {
	fi, err := os.Lstat(u.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("the Slack outbox %s is not a directory (a symbolic link?): nothing in it is delivered", u.dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("the Slack outbox %s is not owned by this account (uid %d): nothing in it is delivered", u.dir, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("the Slack outbox %s is writable by other accounts (mode %04o): nothing in it is delivered", u.dir, fi.Mode().Perm())
	}
	return nil
}

func (u *Updater) list() ([]string, error) {
	if err := u.private(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(u.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasSuffix(n, ".json") && !strings.HasPrefix(n, ".") {
			names = append(names, n)
		}
	}
	return names, nil
}

// Run delivers the pending deliveries, those left by an earlier process
// first, until ctx is done. A delivery in flight when ctx ends is
// abandoned and stays on disk for the next Run.
func (u *Updater) Run(ctx context.Context) {
	names, err := u.list()
	if err != nil {
		u.log.Error("slack: reading pending updates", "dir", u.dir, "error", err.Error())
	}
	u.mu.Lock()
	for _, n := range names {
		if _, ok := u.due[n]; !ok {
			u.due[n] = time.Time{}
		}
	}
	u.mu.Unlock()
	if len(names) > 0 {
		u.log.Info("slack: delivering updates left pending", "count", len(names))
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		name, wait := u.next()
		if name != "" {
			u.deliver(ctx, name)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-u.kick:
		case <-timer.C:
		}
	}
}

// next takes the delivery that is due first, if it is due now, or says how
// long until one is.
func (u *Updater) next() (string, time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var first string
	var at time.Time
	for n, t := range u.due {
		if first == "" || t.Before(at) || (t.Equal(at) && n < first) {
			first, at = n, t
		}
	}
	if first == "" {
		return "", time.Hour
	}
	if wait := time.Until(at); wait > 0 {
		return "", wait
	}
	delete(u.due, first)
	return first, 0
}

// permanentError is a delivery that can never succeed.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// permanentSlack are the Web API errors that retrying cannot mend: the
// message or channel is gone, or what is sent will never be accepted.
var permanentSlack = map[string]bool{
	"channel_not_found": true, "message_not_found": true, "cant_update_message": true,
	"edit_window_closed": true, "is_archived": true, "not_in_channel": true,
	"user_not_in_channel": true, "msg_too_long": true, "invalid_blocks": true,
	"invalid_blocks_format": true, "no_text": true,
}

func (u *Updater) deliver(ctx context.Context, name string) {
	d, err := u.read(name)
	if errors.Is(err, fs.ErrNotExist) {
		return // delivered meanwhile
	}
	if err != nil {
		// Left on disk for a human to look at, but never tried again.
		u.log.Error("slack: unreadable pending update skipped", "error", err.Error())
		return
	}
	if age := u.now().Sub(d.Queued); age > u.maxAge() {
		u.log.Error("slack: pending "+d.Kind+" dropped: too old", "channel", d.Channel, "queued", d.Queued, "attempts", d.Attempts)
		u.done(name, d)
		return
	}
	err = u.send(ctx, d)
	if ctx.Err() != nil {
		return // stopping: kept on disk for the next start
	}
	var pe *permanentError
	var se slack.SlackErrorResponse
	var rl *slack.RateLimitedError
	switch {
	case err == nil:
		u.done(name, d)
	case errors.As(err, &pe) || (errors.As(err, &se) && permanentSlack[se.Err]):
		u.log.Warn("slack: pending "+d.Kind+" dropped", "channel", d.Channel, "error", u.redact(err))
		u.done(name, d)
	default:
		d.Attempts++
		if d.Attempts >= u.maxAttempts() {
			u.log.Error("slack: pending "+d.Kind+" dropped after retries", "channel", d.Channel, "attempts", d.Attempts, "error", u.redact(err))
			u.done(name, d)
			return
		}
		wait := u.backoff(d.Attempts)
		if errors.As(err, &rl) && rl.RetryAfter > wait {
			wait = rl.RetryAfter
		}
		u.log.Warn("slack: "+d.Kind+" failed, will retry", "channel", d.Channel, "attempts", d.Attempts, "retry_in", wait.String(), "error", u.redact(err))
		u.retry(name, d, wait)
	}
}

func (u *Updater) send(ctx context.Context, d *delivery) error {
	ctx, cancel := context.WithTimeout(ctx, u.callTimeout())
	defer cancel()
	switch d.Kind {
	case kindUpdate:
		v, err := bridge.Describe(u.src.Now(), d.Fingerprint, d.Record, u.now())
		if _, ok := refusal.As(err); ok {
			return &permanentError{fmt.Errorf("describing the decision: %w", err)}
		}
		if err != nil {
			return fmt.Errorf("describing the decision: %w", err)
		}
		return update(ctx, u.api, d.Channel, d.TS, v)
	case kindReply:
		if _, err := u.api.PostEphemeralContext(ctx, d.Channel, d.User, slack.MsgOptionText(d.Text, true)); err != nil {
			return fmt.Errorf("chat.postEphemeral: %w", err)
		}
		return nil
	}
	return &permanentError{fmt.Errorf("unknown kind %q", d.Kind)}
}

// done removes a delivery made (or given up), unless it was queued again
// while it was being made.
func (u *Updater) done(name string, d *delivery) {
	u.mu.Lock()
	if cur, err := u.read(name); err != nil || cur.Nonce != d.Nonce {
		u.mu.Unlock()
		return
	}
	err := os.Remove(filepath.Join(u.dir, name))
	delete(u.due, name)
	u.mu.Unlock()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		u.log.Warn("slack: removing a delivered update", "error", err.Error())
		return
	}
	// Unsynced, the removal could be undone by a crash and the delivery
	// repeated. Synced outside the lock, so the endpoint never waits on it.
	_ = durable.SyncDir(u.dir)
}

// retry records the failed attempt and schedules the next, unless the
// delivery was queued again meanwhile (which is then due now).
func (u *Updater) retry(name string, d *delivery, wait time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if cur, err := u.read(name); err != nil || cur.Nonce != d.Nonce {
		return
	}
	if err := u.write(name, d); err != nil {
		u.log.Warn("slack: recording a failed attempt", "error", err.Error())
	}
	u.due[name] = time.Now().Add(wait)
}

func (u *Updater) backoff(attempts int) time.Duration {
	lo, hi := u.MinBackoff, u.MaxBackoff
	if lo <= 0 {
		lo = DefaultMinBackoff
	}
	if hi <= 0 {
		hi = DefaultMaxBackoff
	}
	wait := lo
	for i := 1; i < attempts && wait < hi; i++ {
		wait *= 2
	}
	return min(wait, hi)
}

func (u *Updater) now() time.Time {
	if u.Now != nil {
		return u.Now().UTC()
	}
	return time.Now().UTC()
}

func (u *Updater) callTimeout() time.Duration {
	if u.CallTimeout > 0 {
		return u.CallTimeout
	}
	return DefaultCallTimeout
}

func (u *Updater) maxAttempts() int {
	if u.MaxAttempts > 0 {
		return u.MaxAttempts
	}
	return DefaultMaxAttempts
}

func (u *Updater) maxAge() time.Duration {
	if u.MaxAge > 0 {
		return u.MaxAge
	}
	return DefaultMaxAge
}

func (u *Updater) redact(err error) string {
	return bridge.Redact(err.Error(), u.secrets...)
}
