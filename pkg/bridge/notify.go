package bridge

import (
	"context"
	"fmt"
)

// Poster puts a decision where humans answer it, and closes it there.
type Poster interface {
	// Kind is KindSlack or KindGitHub.
	Kind() string
	// Post shows the decision v and returns where it went.
	Post(ctx context.Context, v *View) (Post, error)
	// Withdrawn marks the decision at p as withdrawn: no buttons, no
	// further answers; v shows the plan as it stands.
	Withdrawn(ctx context.Context, p Post, v *View) error
}

// Notify posts v to every poster and records each post in the ledger. A
// failure of one bridge does not stop the others; the errors are returned
// for the caller to warn about. The record itself is already stored: a
// decision that could not be posted can still be answered on the CLI.
func Notify(ctx context.Context, l *Ledger, posters []Poster, v *View) ([]Post, []error) {
	var posts []Post
	var errs []error
	for _, p := range posters {
		post, err := p.Post(ctx, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("posting the decision to %s: %w", p.Kind(), err))
			continue
		}
		posts = append(posts, post)
		if err := l.Add(post); err != nil {
			errs = append(errs, fmt.Errorf("remembering the %s post (withdraw will not find it): %w", p.Kind(), err))
		}
	}
	return posts, errs
}

// NotifyWithdrawn marks every posted decision of plan fp as withdrawn.
// describe gives the view of one record of the plan.
func NotifyWithdrawn(ctx context.Context, l *Ledger, posters []Poster, fp string, describe func(record string) (*View, error)) ([]Post, []error) {
	posts, err := l.Posts(fp)
	if err != nil {
		return nil, []error{fmt.Errorf("reading where the decision was posted: %w", err)}
	}
	byKind := map[string]Poster{}
	for _, p := range posters {
		byKind[p.Kind()] = p
	}
	var done []Post
	var errs []error
	for _, post := range posts {
		p, ok := byKind[post.Kind]
		if !ok {
			errs = append(errs, fmt.Errorf("the decision posted to %s cannot be closed (that bridge is not available here): close it there by hand", post.Kind))
			continue
		}
		v, err := describe(post.Record)
		if err != nil {
			errs = append(errs, fmt.Errorf("describing the withdrawn plan: %w", err))
			continue
		}
		if err := p.Withdrawn(ctx, post, v); err != nil {
			errs = append(errs, fmt.Errorf("marking the %s decision withdrawn: %w", post.Kind, err))
			continue
		}
		done = append(done, post)
	}
	return done, errs
}
