package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

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
		r.Redacted = !a.Env.MayReadPlans()
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

func (a serviceAPI) ReceiptsList(ctx context.Context, req api.ReceiptsListRequest) (*api.ReceiptsListResult, error) {
	var r api.ReceiptsListResult
	if err := a.call(ctx, "receipts-list", req, &r); err != nil {
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

// receiptsList is receipts list through the API this caller reaches,
// page by page, rendered here: a table, or JSON Lines
// (docs/adr/0041-receipts-list-json-lines.md). An outcome's operation
// and fingerprint are its intent's, a review's its run's, joined here
// across pages.
func receiptsList(ctx context.Context, f *Factory, last int) error {
	a, err := f.api()
	if err != nil {
		return err
	}
	r, err := a.ReceiptsList(ctx, api.ReceiptsListRequest{Last: last})
	if err != nil {
		return err
	}
	if r.Empty != "" {
		// For machines, JSON Lines of no entry, which is no line at all
		// (docs/JSON.md).
		if f.JSON {
			return nil
		}
		_, err := fmt.Fprintln(f.IO.Out, r.Empty)
		return err
	}
	for _, w := range r.Warnings {
		Warnf(f, "%s", w)
	}
	bgs := &breakGlassLister{runs: r.BreakGlass, redact: r.Redacted}
	out := bufio.NewWriterSize(f.IO.Out, 64<<10)
	defer out.Flush()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if !f.JSON {
		fmt.Fprintln(tw, "SEQ\tKIND\tRUN\tTIME\tOPERATION\tFINGERPRINT\tEXIT")
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	// Only runs whose outcome is still to come are remembered, and
	// break-glass runs, which a review names after their outcome.
	type planned struct{ op, fp string }
	open := map[string]planned{}
	broke := map[string]planned{}
	rows := 0
	for {
		for _, p := range r.Problems {
			if last > 0 {
				fmt.Fprintf(f.IO.Err, "prod-write: line %d of the last %d is not a receipt: %s\n", p.Line, last, p.Error)
			} else {
				fmt.Fprintf(f.IO.Err, "prod-write: line %d is not a receipt: %s\n", p.Line, p.Error)
			}
		}
		for _, e := range r.Entries {
			op, fp, exit := e.Operation, e.Fingerprint, ""
			bg := bgs.mark(e.Line, e.Seq, e.RunID)
			kind := e.Kind
			if bg != nil {
				kind += " (break-glass)"
			}
			if e.Kind == receipts.KindIntent && e.RunID != "" {
				open[e.RunID] = planned{op, fp}
				if e.BreakGlassPath {
					broke[e.RunID] = planned{op, fp}
				}
			}
			if p, ok := broke[e.RunID]; ok && e.Kind == receipts.KindReview {
				op, fp = p.op, p.fp
			}
			if e.ExitCode != nil {
				exit = strconv.Itoa(*e.ExitCode)
				if p, ok := open[e.RunID]; ok {
					op, fp = p.op, p.fp
					delete(open, e.RunID)
				}
			}
			if f.JSON {
				// Per line, the names replay --json uses for the same
				// entry (docs/JSON.md); with --last, no line numbers.
				line := e.Line
				if last > 0 {
					line = 0
				}
				if err := enc.Encode(receiptLine{FormatVersion: FormatVersion, Line: line, Seq: e.Seq, Kind: e.Kind, RunID: e.RunID, Time: e.Time,
					Operation: op, Fingerprint: fp, Runner: e.Runner, ExitCode: e.ExitCode, BreakGlass: bg, Redacted: bg != nil && bgs.redact}); err != nil {
					return err
				}
				continue
			}
			if len(fp) > 23 {
				fp = fp[:23] + "…"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, kind, e.RunID, e.Time.Format("2006-01-02T15:04:05Z"), op, fp, exit)
			if rows++; rows%tableBlock == 0 {
				if err := tw.Flush(); err != nil {
					return err
				}
			}
		}
		if r.Next == nil {
			break
		}
		if r, err = a.ReceiptsList(ctx, api.ReceiptsListRequest{Last: last, Page: r.Next}); err != nil {
			return err
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !f.JSON {
		bgs.print(out) // after the table, which out still holds
	}
	return nil
}
