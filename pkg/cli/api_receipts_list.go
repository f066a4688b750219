package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

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
		f.Warn("%s", w)
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
				if err := enc.Encode(receiptLine{FormatVersion: localapi.FormatVersion, Line: line, Seq: e.Seq, Kind: e.Kind, RunID: e.RunID, Time: e.Time,
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
