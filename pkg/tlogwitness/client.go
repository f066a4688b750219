// Package tlogwitness sends the receipts log's checkpoints to witnesses
// by the C2SP tlog-witness protocol (https://c2sp.org/tlog-witness) and
// keeps the cosignatures they return (ADR 0044, "Witnesses").
//
// A witness's answers are input from a party the service does not
// control: bodies are bounded, requests time out, redirects are not
// followed, no proxy comes from the environment, and a cosignature is
// kept only once it verifies, with the witness's key from the trust
// policy, over the checkpoint sent. Nothing a witness answers can make
// the service sign, write a receipt, or keep a cosignature that is not
// that witness's over that checkpoint.
package tlogwitness

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxResponse bounds a witness's answer: cosignature lines or a size.
const MaxResponse = 64 << 10

// DefaultTimeout bounds one add-checkpoint request, connection included.
const DefaultTimeout = 10 * time.Second

// The answers of tlog-witness that name what is wrong. They wrap into
// the *StatusError that carries the status and the witness's words.
var (
	// ErrBadRequest (400): the witness could not parse the request, or
	// old is larger than the checkpoint's size.
	ErrBadRequest = errors.New("the witness refused the request as malformed (400)")
	// ErrForbidden (403): the checkpoint's signature does not verify
	// with the key the witness holds for the log.
	ErrForbidden = errors.New("the witness does not accept the runner key's signature for this log (403)")
	// ErrUnknownLog (404): the witness does not witness this origin.
	ErrUnknownLog = errors.New("the witness does not know this log (404)")
	// ErrInconsistent (422): the consistency proof from the tree the
	// witness holds to this checkpoint does not verify: the journal is
	// not an extension of what the witness saw.
	ErrInconsistent = errors.New("the witness found the checkpoint inconsistent with the tree it holds (422)")
)

// StatusError is an answer other than 200 and a well-formed 409.
type StatusError struct {
	Code int
	Body string // at most 200 bytes of the answer, for the log
	Err  error  // one of the Err values above, or nil
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("witness answered %d", e.Code)
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Body != "" {
		msg += ": " + strconv.Quote(e.Body)
	}
	return msg
}

func (e *StatusError) Unwrap() error { return e.Err }

// ConflictError (409) is the witness's size of the log, when it is not
// the old size sent: the request is to be made again from it.
type ConflictError struct{ Size uint64 }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("the witness holds the log at size %d (409)", e.Size)
}

// Client makes add-checkpoint requests.
type Client struct{ HTTP *http.Client }

// NewClient is a client whose requests take at most timeout each (0:
// DefaultTimeout), with no proxy from the environment, no redirect
// followed, and bounded response headers.
func NewClient(timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: timeout}).DialContext,
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 16 << 10,
		MaxIdleConns:           4,
		IdleConnTimeout:        time.Minute,
		ForceAttemptHTTP2:      true,
	}
	return &Client{HTTP: &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

// AddCheckpointBody is the body of an add-checkpoint request: the old
// size, the consistency proof from it, an empty line, the checkpoint.
func AddCheckpointBody(old uint64, proof [][]byte, checkpoint []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", old)
	for _, h := range proof {
		b.WriteString(base64.StdEncoding.EncodeToString(h))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(checkpoint)
	return b.Bytes()
}

// AddCheckpoint posts checkpoint to the witness at base (its URL prefix;
// the request goes to base + "/add-checkpoint") with the consistency
// proof from old, the size the witness is believed to hold. It returns
// the witness's answer on 200 (cosignature lines, unverified: see
// [Submit]), a *ConflictError on a well-formed 409, and a *StatusError
// otherwise.
func (c *Client) AddCheckpoint(ctx context.Context, base string, old uint64, proof [][]byte, checkpoint []byte) ([]byte, error) {
	url := strings.TrimSuffix(base, "/") + "/add-checkpoint"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(AddCheckpointBody(old, proof, checkpoint)))
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", base, err)
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("witness %s: reading its answer: %w", base, err)
	}
	if len(body) > MaxResponse {
		return nil, &StatusError{Code: resp.StatusCode, Body: fmt.Sprintf("(an answer over %d bytes, not read)", MaxResponse)}
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return body, nil
	case http.StatusConflict:
		// SPEC: the body is the witness's size of the log, as a
		// decimal, with Content-Type text/x.tlog.size.
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		n, perr := strconv.ParseUint(strings.TrimSuffix(string(body), "\n"), 10, 64)
		if mt == "text/x.tlog.size" && perr == nil {
			return nil, &ConflictError{Size: n}
		}
		return nil, &StatusError{Code: resp.StatusCode, Body: short(body)}
	}
	se := &StatusError{Code: resp.StatusCode, Body: short(body)}
	switch resp.StatusCode {
	case http.StatusBadRequest:
		se.Err = ErrBadRequest
	case http.StatusForbidden:
		se.Err = ErrForbidden
	case http.StatusNotFound:
		se.Err = ErrUnknownLog
	case http.StatusUnprocessableEntity:
		se.Err = ErrInconsistent
	}
	return nil, se
}

// short is at most 200 bytes of b, printable, for a log line.
func short(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return strings.ToValidUTF8(strings.TrimSpace(string(b)), "?")
}
