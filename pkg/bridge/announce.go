package bridge

import (
	"context"
	"fmt"
	"time"
)

// Announcer is a [Poster] that can post a notice that is not a decision:
// no buttons, nothing to answer (a break-glass run,
// docs/adr/0028-break-glass.md).
type Announcer interface {
	Poster
	// Announce posts n on its own and returns where it went; fp and
	// record name what it is about (for the ledger).
	Announce(ctx context.Context, fp, record string, at time.Time, n Notice) (Post, error)
}

// Announce posts n to every poster, records each post in the ledger and
// returns the posts and the errors: a poster that cannot announce is an
// error too, so that nobody takes silence for a notification made
// (docs/adr/0028-break-glass.md).
func Announce(ctx context.Context, l *Ledger, posters []Poster, fp, record string, at time.Time, n Notice) ([]Post, []error) {
	var posts []Post
	var errs []error
	for _, p := range posters {
		a, ok := p.(Announcer)
		if !ok {
			errs = append(errs, fmt.Errorf("the %s bridge cannot post a notice", p.Kind()))
			continue
		}
		post, err := a.Announce(ctx, fp, record, at, n)
		if err != nil {
			errs = append(errs, fmt.Errorf("posting the notice to %s: %w", p.Kind(), err))
			continue
		}
		posts = append(posts, post)
		if err := l.Add(post); err != nil {
			errs = append(errs, fmt.Errorf("remembering the %s post: %w", p.Kind(), err))
		}
	}
	return posts, errs
}
