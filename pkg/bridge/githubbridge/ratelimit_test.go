package githubbridge_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/bridge/githubbridge"
)

// fakeClock is the rate limiter's clock. It starts an hour in the past,
// so that the resets the tests hand GitHub's headers are already past for
// go-github (which keeps its own record, on the real clock): what holds
// requests back is the Limiter alone.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now().Add(-time.Hour)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// limitedPoller is the rig's poller with a client whose Limiter runs on
// clock, without jitter.
func (r *rig) limitedPoller(t *testing.T, clock *fakeClock) *githubbridge.Poller {
	t.Helper()
	lim := &githubbridge.Limiter{Now: clock.Now, Jitter: func(time.Duration) time.Duration { return 0 }}
	client, err := githubbridge.NewClient(r.gh.APIURL(), bridgetest.Secret(token), &http.Client{Transport: lim})
	if err != nil {
		t.Fatal(err)
	}
	p := r.poller(t)
	p.Client = client
	return p
}

// pollHeld polls times times, evenly over the next d on clock (the last
// poll d from now), and fails if any request reaches GitHub.
func pollHeld(t *testing.T, r *rig, p *githubbridge.Poller, clock *fakeClock, d time.Duration, times int) {
	t.Helper()
	before := r.gh.Stats().Requests
	step := d / time.Duration(times)
	for i := 0; i < times; i++ {
		if i == times-1 {
			step = d - step*time.Duration(times-1)
		}
		clock.Advance(step)
		_, err := p.PollOnce(context.Background())
		var rl *githubbridge.RateLimitedError
		if !errors.As(err, &rl) {
			t.Fatalf("poll %d: %v, want a *RateLimitedError", i, err)
		}
	}
	if got := r.gh.Stats().Requests - before; got != 0 {
		t.Fatalf("%d requests reached GitHub while rate limited", got)
	}
}

// After one 429 with retry-after 60 the poller makes no request for 60
// seconds, however often it is asked to poll (the issue saw 132 GETs in
// 6 s), then resumes and records the answer. A longer retry-after (or a
// 403's) holds as long, well past the minute a bare 429 gets.
func TestRetryAfterHoldsEveryRequest(t *testing.T) {
	for _, tc := range []struct {
		status     int
		retryAfter int
	}{{http.StatusTooManyRequests, 60}, {http.StatusTooManyRequests, 300}, {http.StatusForbidden, 90}} {
		t.Run(fmt.Sprintf("%d retry-after %d", tc.status, tc.retryAfter), func(t *testing.T) {
			r := newRig(t, 1, 0)
			clock := newFakeClock()
			p := r.limitedPoller(t, clock)
			r.comment("alice", "/approve "+r.w.FP)
			// A body go-github does not take for a rate limit: the
			// Limiter alone holds requests back.
			r.gh.ThrottleWith(1, tc.status, map[string]string{"Retry-After": strconv.Itoa(tc.retryAfter)}, `{"message":"slow down"}`)
			if _, err := p.PollOnce(context.Background()); err == nil {
				t.Fatal("the rate-limit response was not an error")
			}
			if got := r.gh.Stats().Requests; got != 2 {
				t.Fatalf("%d requests, want the decision's POST and the GET answered %d", got, tc.status)
			}
			wait := time.Duration(tc.retryAfter) * time.Second
			pollHeld(t, r, p, clock, wait-time.Second, 132)
			clock.Advance(time.Second)
			if n := poll(t, p); n.Recorded != 1 {
				t.Fatalf("poll after the wait: %+v\n%s", n, r.log)
			}
		})
	}
}

// A 403 or 429 with x-ratelimit-remaining 0 holds requests until
// x-ratelimit-reset.
func TestRateLimitResetHoldsUntilReset(t *testing.T) {
	for _, status := range []int{http.StatusForbidden, http.StatusTooManyRequests} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			r := newRig(t, 1, 0)
			clock := newFakeClock()
			p := r.limitedPoller(t, clock)
			r.comment("alice", "/approve "+r.w.FP)
			reset := clock.Now().Add(120 * time.Second).Unix()
			r.gh.Throttle(1, status, map[string]string{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": strconv.FormatInt(reset, 10)})
			if _, err := p.PollOnce(context.Background()); err == nil {
				t.Fatal("the rate-limit response was not an error")
			}
			pollHeld(t, r, p, clock, 120*time.Second, 50)
			clock.Advance(2 * time.Second) // the reset, and a second for the clocks' difference
			if n := poll(t, p); n.Recorded != 1 {
				t.Fatalf("poll after the reset: %+v\n%s", n, r.log)
			}
		})
	}
}

// A rate-limit response that says neither how long nor until when: at
// least a minute, then exponentially longer while GitHub keeps refusing;
// a success ends the backoff. A 403 that is no rate limit (a missing
// permission) holds nothing.
func TestBackoffWithoutHeaders(t *testing.T) {
	r := newRig(t, 1, 0)
	clock := newFakeClock()
	p := r.limitedPoller(t, clock)
	r.gh.Throttle(2, http.StatusTooManyRequests, nil)
	if _, err := p.PollOnce(context.Background()); err == nil {
		t.Fatal("the 429 was not an error")
	}
	pollHeld(t, r, p, clock, time.Minute-time.Second, 10)
	clock.Advance(2 * time.Second)
	if _, err := p.PollOnce(context.Background()); err == nil {
		t.Fatal("the second 429 was not an error")
	}
	if got := r.gh.Stats().Throttled; got != 2 {
		t.Fatalf("%d requests answered 429, want 2", got)
	}
	pollHeld(t, r, p, clock, 2*time.Minute-time.Second, 10) // twice as long
	clock.Advance(2 * time.Second)
	poll(t, p)
	// The success reset the backoff: the next 429 holds a minute again.
	r.gh.Throttle(1, http.StatusForbidden, nil) // a secondary limit: its body says so
	r.comment("bob", "any news?")
	p.PollOnce(context.Background())
	pollHeld(t, r, p, clock, time.Minute-time.Second, 5)
	clock.Advance(2 * time.Second)
	poll(t, p)

	r.gh.Forbid(`{"message":"Resource not accessible by personal access token"}`)
	r.comment("bob", "still nothing?")
	before := r.gh.Stats().Requests
	if _, err := p.PollOnce(context.Background()); err == nil {
		t.Fatal("the 403 was not an error")
	}
	poll(t, p)
	if got := r.gh.Stats().Requests - before; got != 2 {
		t.Errorf("a permission 403 held requests back: %d requests, want 2", got)
	}
}

// The retry-after is honoured by Run itself, on the real clock: no request
// while it holds, polling again after.
func TestRunWaitsForRetryAfter(t *testing.T) {
	r := newRig(t, 1, 0)
	p := r.poller(t)
	r.comment("alice", "/approve "+r.w.FP)
	r.gh.Throttle(1, http.StatusTooManyRequests, map[string]string{"Retry-After": "1"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	time.Sleep(700 * time.Millisecond)
	if got := r.gh.Stats().Requests; got != 2 {
		t.Fatalf("%d requests within the retry-after, want the decision's POST and the GET answered 429", got)
	}
	for deadline := time.Now().Add(5 * time.Second); len(r.w.Answers(t)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing recorded after the retry-after\n%s", r.log)
		}
	}
}
