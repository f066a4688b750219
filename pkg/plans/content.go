package plans

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// keepContent keeps, in the store the plan goes to, the content of the
// plan's files, read as the caller handed them over
// (docs/adr/0063-file-content-kept-with-the-plan.md):
//
//   - a file supplied inline, always: run takes it from there, and a
//     plan whose content cannot be kept is not stored;
//   - any other file of at most bridge.DiffMaxInput bytes that the
//     operation does not mark secret, so that approvers are shown the
//     bytes the plan binds, never a path read again later. One that
//     cannot be kept is shown as not kept.
func keepContent(rn *runner.Runner, st store.Store, plan *operations.Plan, op *operations.Operation) error {
	for _, fl := range plan.Files {
		_, inline := operations.InlineName(fl.Path)
		if !inline && (fl.Size > bridge.DiffMaxInput || op.Files[fl.Name].Secret) {
			continue
		}
		data, err := callerBytes(rn, fl, inline)
		if err == nil {
			err = st.PutContent(fl.SHA256, data)
		}
		if err != nil && inline {
			return fmt.Errorf("keeping the content of file %s with the plan: %w", fl.Name, err)
		}
	}
	return nil
}

// callerBytes reads file fl as the caller has it, checked against its
// size and sum: the content supplied inline, the descriptor the service's
// client handed over, or, in-process, the path (the planner's own).
func callerBytes(rn *runner.Runner, fl operations.File, inline bool) ([]byte, error) {
	var src *os.File
	var err error
	switch {
	case inline && rn.Inline != nil:
		var owned bool
		if src, owned, err = rn.Inline(fl.Name, ""); err == nil && owned {
			defer src.Close()
		}
	case inline:
		return nil, errors.New("supplied inline outside the runner service")
	case rn.OpenFile != nil:
		src, err = rn.OpenFile(fl.Name, fl.Path) // the call's: it closes it
	default:
		if src, err = os.OpenFile(fl.Path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0); err == nil {
			defer src.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	fi, err := src.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.NewSectionReader(src, 0, fl.Size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != fl.Size || store.SumOf(data) != fl.SHA256 {
		return nil, errors.New("changed since it was hashed")
	}
	return data, nil
}
