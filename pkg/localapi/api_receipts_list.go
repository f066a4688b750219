package localapi

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/receipts"
)

// ReceiptsListPage bounds the entries of one page of receipts list: a
// page is read, sent and rendered whole, so what it holds is this bound,
// never the journal.
const ReceiptsListPage = 4096

func (a API) ReceiptsList(_ context.Context, req api.ReceiptsListRequest) (*api.ReceiptsListResult, error) {
	if req.Last < 0 {
		return nil, &UsageError{Msg: "--last must not be negative"}
	}
	fl, err := OpenJournal(a.Env)
	var none *noJournalError
	if errors.As(err, &none) {
		return &api.ReceiptsListResult{Empty: none.Error(), Entries: []*api.ReceiptsListEntry{}}, nil
	}
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	fi, err := fl.Stat()
	if err != nil {
		return nil, err
	}
	r := &api.ReceiptsListResult{Entries: []*api.ReceiptsListEntry{}}
	page := req.Page
	if page == nil {
		if fi.Size() == 0 {
			r.Empty = noReceipts(fl.Name(), false)
			return r, nil
		}
		// The lines listed: the journal as it is now, or its last N, read
		// from the end (what that costs is the N lines, not the journal).
		// Either is one stretch of the journal, [from, to), which every
		// page reads within: a line longer than receipts.MaxLine is what
		// replay reads too (not a receipt, with its hash, so the next
		// still chains).
		page = &api.ReceiptsListPage{To: fi.Size()}
		if req.Last > 0 {
			page.To = -1
			n := 0
			err = receipts.ScanBack(fl, fi.Size(), func(l receipts.Line) bool {
				if page.To < 0 {
					page.To = l.Off + int64(len(l.Bytes)) + l.Long + 1 // past its newline
				}
				page.From, n = l.Off, n+1
				return n == req.Last
			})
			if err != nil {
				return nil, err
			}
			if page.To < 0 {
				page.To = 0 // no complete line
			}
		}
		// First the break-glass runs, as replay judges them: whether one
		// is reviewed may be said by any later line. A caller with no key
		// of the policy reads no breaker's reason or incident: free text
		// about the plan, as the evidence is (ADR 0040).
		r.Redacted = a.Redact
		var warning string
		r.BreakGlass, warning, err = breakGlassRunsOf(a.Env, io.NewSectionReader(fl, page.From, page.To-page.From), r.Redacted)
		if err != nil {
			return nil, err
		}
		if warning != "" {
			r.Warnings = append(r.Warnings, warning)
		}
	} else if err := checkListPage(fl, fi.Size(), page); err != nil {
		return nil, err
	}
	// One page: up to receiptsListPage lines from page.From.
	off, n := page.From, page.Line
	err = receipts.Scan(io.NewSectionReader(fl, page.From, page.To-page.From), func(l receipts.Line) error {
		if n-page.Line == ReceiptsListPage {
			return errPageFull
		}
		n++
		off = page.From + l.Off + int64(len(l.Bytes)) + l.Long + 1
		_, rc, err := receipts.DecodeLine(l)
		if err != nil {
			r.Problems = append(r.Problems, api.ReceiptsListProblem{Line: n, Error: err.Error()})
			return nil
		}
		e := &api.ReceiptsListEntry{Line: n, Seq: rc.Seq, Kind: rc.Kind, RunID: rc.RunID, Time: rc.Time, Runner: rc.Runner}
		switch {
		case rc.Intent != nil:
			e.Fingerprint = rc.Intent.Fingerprint
			if rc.Intent.Operation != nil {
				e.Operation = rc.Intent.Operation.Name
			}
			e.BreakGlassPath = rc.Intent.Path == operations.PathBreakGlass
		case rc.Kind == receipts.KindReview && rc.Review != nil:
			e.Fingerprint = reviewedPlan(rc.Review.Review)
		case rc.Outcome != nil:
			code := rc.Outcome.ExitCode
			e.ExitCode = &code
		}
		r.Entries = append(r.Entries, e)
		return nil
	})
	if errors.Is(err, errPageFull) {
		r.Next = &api.ReceiptsListPage{From: off, To: page.To, Line: n}
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// errPageFull ends the reading of a page.
var errPageFull = errors.New("the page is full")

// checkListPage refuses a page that does not go on a listing: one that
// starts elsewhere than at a line's start, or outside the journal. (Read
// from the middle of a line, a part of a receipt could read as another.)
func checkListPage(fl io.ReaderAt, size int64, p *api.ReceiptsListPage) error {
	if p.From < 0 || p.From > p.To || p.To > size || p.Line < 0 {
		return &UsageError{Msg: fmt.Sprintf("receipts list: page [%d, %d) is not within the journal's %d bytes", p.From, p.To, size)}
	}
	if p.From == 0 {
		return nil
	}
	var b [1]byte
	if _, err := fl.ReadAt(b[:], p.From-1); err != nil {
		return err
	}
	if b[0] != '\n' {
		return &UsageError{Msg: fmt.Sprintf("receipts list: page at byte %d does not start a line", p.From)}
	}
	return nil
}

func (a ServiceClient) ReceiptsList(ctx context.Context, req api.ReceiptsListRequest) (*api.ReceiptsListResult, error) {
	var r api.ReceiptsListResult
	if err := callInto(ctx, a, api.CallReceiptsList, req, nil, &r); err != nil {
		return nil, err
	}
	for _, e := range r.Entries {
		if e == nil {
			return nil, errors.New("the runner service's receipts list answered an empty entry")
		}
	}
	if r.Next != nil && (len(r.Entries)+len(r.Problems) == 0 || (req.Page != nil && r.Next.From <= req.Page.From)) {
		// A page that does not move on would list forever.
		return nil, errors.New("the runner service's receipts list answered a page that does not move on")
	}
	return &r, nil
}
