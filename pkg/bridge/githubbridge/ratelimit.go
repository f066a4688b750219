package githubbridge

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Backoff bounds for a rate-limit response that says neither how long to
// wait (retry-after) nor until when (x-ratelimit-reset): GitHub asks for at
// least a minute, then exponentially longer while it keeps refusing.
const (
	BackoffMin = time.Minute
	BackoffMax = 30 * time.Minute
)

// Limiter is the bridge's HTTP transport to GitHub: it keeps the bridge
// inside GitHub's rate limits as GitHub's REST documentation asks ("Rate
// limits for the REST API", "Best practices"). After a 403 or 429 it sends
// nothing until
//
//   - retry-after seconds have passed, when the response has that header;
//   - else x-ratelimit-reset (UTC epoch seconds), when x-ratelimit-remaining
//     is 0;
//   - else (a 429, or a 403 whose body names a rate limit) a minute, then
//     exponentially longer with jitter for each such response in a row, up
//     to [BackoffMax].
//
// A success with x-ratelimit-remaining 0 also holds requests until the
// reset. A held request fails at once with a [*RateLimitedError] and never
// reaches GitHub. A 403 that is not a rate limit (a missing permission)
// holds nothing.
//
// go-github keeps its own record of the primary and secondary limits it
// recognises (403s only); the Limiter adds 429, a rate-limited 403 whose
// body go-github does not recognise, and the backoff. One Limiter serves a
// client and all its copies, so the poller, the webhook handler's replies
// and acknowledgements share it.
type Limiter struct {
	// Base sends the requests; nil is http.DefaultTransport.
	Base http.RoundTripper
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Jitter returns a random duration in [0, d); nil draws uniformly.
	Jitter func(d time.Duration) time.Duration

	mu      sync.Mutex
	until   time.Time
	why     string
	strikes int
}

// RateLimitedError is a request the [Limiter] held back.
type RateLimitedError struct {
	// Until is when requests may be sent again, Wait how long that was
	// from the refusal.
	Until time.Time
	Wait  time.Duration
	// Why names the response that imposed the wait.
	Why string
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("GitHub rate limit (%s): no request to GitHub until %s (%s from now)",
		e.Why, e.Until.UTC().Format(time.RFC3339), e.Wait.Round(time.Second))
}

func (l *Limiter) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// Blocked returns the wait in force now, or nil.
func (l *Limiter) Blocked() *RateLimitedError {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.until) {
		return &RateLimitedError{Until: l.until, Wait: l.until.Sub(now), Why: l.why}
	}
	return nil
}

// RoundTrip implements http.RoundTripper.
func (l *Limiter) RoundTrip(req *http.Request) (*http.Response, error) {
	if e := l.Blocked(); e != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, e
	}
	base := l.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	l.observe(resp)
	return resp, nil
}

// observe records the wait a response imposes.
func (l *Limiter) observe(resp *http.Response) {
	now := l.now()
	h := resp.Header
	code := resp.StatusCode
	l.mu.Lock()
	defer l.mu.Unlock()
	if code != http.StatusForbidden && code != http.StatusTooManyRequests {
		if code < 400 {
			l.strikes = 0
		}
		if reset, ok := exhausted(h, now); ok {
			l.hold(reset, "x-ratelimit-remaining 0 until x-ratelimit-reset")
		}
		return
	}
	if d, ok := retryAfter(h, now); ok {
		l.hold(now.Add(d), fmt.Sprintf("%d with retry-after %s", code, d))
		return
	}
	if reset, ok := exhausted(h, now); ok {
		l.hold(reset, fmt.Sprintf("%d with x-ratelimit-remaining 0", code))
		return
	}
	if code == http.StatusForbidden && !mentionsRateLimit(resp) {
		return // a permission missing, not a rate limit
	}
	l.strikes++
	d := BackoffMin
	for i := 1; i < l.strikes && d < BackoffMax; i++ {
		d *= 2
	}
	d = min(d, BackoffMax)
	d += l.jitter(d / 4)
	l.hold(now.Add(d), fmt.Sprintf("%d without retry-after, backing off %s (rate-limit response %d in a row)", code, d.Round(time.Second), l.strikes))
}

// hold keeps requests back until t, unless a longer hold is in force.
func (l *Limiter) hold(t time.Time, why string) {
	if t.After(l.until) {
		l.until, l.why = t, why
	}
}

func (l *Limiter) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if l.Jitter != nil {
		return l.Jitter(d)
	}
	return rand.N(d)
}

// retryAfter reads retry-after: seconds, as GitHub sends it, or an HTTP
// date, as RFC 9110 allows.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// exhausted reports the reset time of a primary rate limit with nothing
// left. A reset already past on this clock (the clocks disagree) is
// treated as a minute away rather than as no wait at all.
func exhausted(h http.Header, now time.Time) (time.Time, bool) {
	if strings.TrimSpace(h.Get("X-Ratelimit-Remaining")) != "0" {
		return time.Time{}, false
	}
	s, err := strconv.ParseInt(strings.TrimSpace(h.Get("X-Ratelimit-Reset")), 10, 64)
	if err != nil {
		return now.Add(BackoffMin), true
	}
	reset := time.Unix(s, 0)
	if !reset.After(now) {
		return now.Add(BackoffMin), true
	}
	return reset.Add(time.Second), true
}

// mentionsRateLimit reports whether a 403's body says it is a rate limit
// (GitHub's secondary limits do: "You have exceeded a secondary rate
// limit"). The body is put back for the client to read.
func mentionsRateLimit(resp *http.Response) bool {
	if resp.Body == nil {
		return false
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	return bytes.Contains(bytes.ToLower(b), []byte("rate limit"))
}
