package service

import (
	"errors"
	"net"
	"os"
	"testing"
)

// A closed peer reads as closed, with the words it always had, though
// errEOF is no longer made by fmt.
func TestClosedPeerError(t *testing.T) {
	if !IsClosed(errEOF) || !errors.Is(errEOF, os.ErrClosed) || errors.Is(errEOF, net.ErrClosed) {
		t.Fatalf("errEOF %v: not os.ErrClosed alone", errEOF)
	}
	if got, want := errEOF.Error(), "runner service: connection closed: file already closed"; got != want {
		t.Fatalf("errEOF says %q, want %q", got, want)
	}
}
