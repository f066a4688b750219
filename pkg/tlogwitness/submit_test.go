package tlogwitness_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/transparency-dev/formats/log"
	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/testservers"
	"github.com/prod-write/prod-write/pkg/tlogwitness"
	"github.com/prod-write/prod-write/receipts"
)

func TestMain(m *testing.M) { testservers.Main(m) }

const origin = "prod-write/receipts/host-a"

// logKit is a log of n leaves, its runner key, and notes of its sizes.
type logKit struct {
	key  *keys.Private
	tree *receipts.Tree
	vkey string // the runner's note verifier key
}

func newLog(t testing.TB, n int) *logKit {
	t.Helper()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	var lines bytes.Buffer
	for i := range n {
		fmt.Fprintf(&lines, "{\"line\":%d}\n", i)
	}
	tree, err := receipts.TreeOf(&lines)
	if err != nil {
		t.Fatal(err)
	}
	_, vkey, err := receipts.NoteVerifier(origin, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return &logKit{key: k, tree: tree, vkey: vkey}
}

func (l *logKit) note(t testing.TB, size uint64) []byte {
	t.Helper()
	b, err := receipts.SignNoteCheckpoint(l.key, origin, l.tree, size)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeWitness is a tlog-witness written for these tests: it checks the
// runner's signature and the consistency proof from the size it holds,
// cosigns with a cosignature/v1 key, and can be told to misbehave.
type fakeWitness struct {
	t       testing.TB
	signer  note.Signer
	logV    note.Verifier
	vkey    string
	mu      sync.Mutex
	size    uint64
	root    []byte
	calls   int
	olds    []uint64
	misdo   func(w http.ResponseWriter, r *http.Request, call int) bool // true: answered
	srv     *httptest.Server
	witness tlogwitness.Witness
}

func newFake(t *testing.T, l *logKit, name string) *fakeWitness {
	t.Helper()
	f := newFakeNoServer(t, l, name)
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	f.witness.URL = f.srv.URL
	return f
}

// newFakeNoServer is a fake witness's keys, not serving.
func newFakeNoServer(t testing.TB, l *logKit, name string) *fakeWitness {
	skey, plain, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fnote.NewSignerForCosignatureV1(skey)
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := fnote.VKeyToCosignatureV1(plain)
	if err != nil {
		t.Fatal(err)
	}
	v, err := fnote.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		t.Fatal(err)
	}
	logV, err := note.NewVerifier(l.vkey)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeWitness{t: t, signer: s, logV: logV, vkey: vkey}
	f.witness = tlogwitness.Witness{Name: name, Verifier: v}
	return f
}

// callCount is how many requests the fake has had.
func (f *fakeWitness) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeWitness) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls++
	call, misdo := f.calls, f.misdo
	f.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/add-checkpoint" {
		http.Error(w, "no", http.StatusNotFound)
		return
	}
	// Outside the lock: a misdoing witness may hold its answer back.
	if misdo != nil && misdo(w, r, call) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	br := bufio.NewReader(bytes.NewReader(body))
	first, _ := br.ReadString('\n')
	old, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(first, "old "), "\n"), 10, 64)
	if err != nil {
		http.Error(w, "old", http.StatusBadRequest)
		return
	}
	f.olds = append(f.olds, old)
	var hashes [][]byte
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			http.Error(w, "proof", http.StatusBadRequest)
			return
		}
		if l == "\n" {
			break
		}
		h, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(l, "\n"))
		if err != nil {
			http.Error(w, "proof line", http.StatusBadRequest)
			return
		}
		hashes = append(hashes, h)
	}
	cpRaw, _ := io.ReadAll(br)
	n, err := note.Open(cpRaw, note.VerifierList(f.logV))
	if err != nil {
		http.Error(w, "signature", http.StatusForbidden)
		return
	}
	var cp log.Checkpoint
	if _, err := cp.Unmarshal([]byte(n.Text)); err != nil || cp.Origin != origin {
		http.Error(w, "origin", http.StatusNotFound)
		return
	}
	if old != f.size {
		w.Header().Set("Content-Type", "text/x.tlog.size")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, "%d\n", f.size)
		return
	}
	if old > 0 {
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old, cp.Size, hashes, f.root, cp.Hash); err != nil {
			http.Error(w, "consistency", http.StatusUnprocessableEntity)
			return
		}
	}
	f.size, f.root = cp.Size, cp.Hash
	signed, err := note.Sign(&note.Note{Text: n.Text}, f.signer)
	if err != nil {
		f.t.Error(err)
		return
	}
	_, sig, _ := bytes.Cut(signed, []byte("\n\n"))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write(sig)
}

// cosignedBy reports whether st's kept cosignature verifies as f's over
// st.Cosigned with receipts' own check.
func verifyKept(t *testing.T, f *fakeWitness, st tlogwitness.State, size uint64) {
	t.Helper()
	if st.Size != size || st.Error != "" || st.Cosignature == "" {
		t.Fatalf("state %+v; want size %d cosigned", st, size)
	}
	if _, err := note.Open([]byte(st.Cosigned+st.Cosignature), note.VerifierList(f.witness.Verifier)); err != nil {
		t.Fatalf("the kept cosignature does not verify: %v", err)
	}
}

// TestSubmitToFakes: every answer of the tlog-witness protocol, and what
// a witness cannot make the service do: keep a cosignature that is not
// its own over the checkpoint sent, follow a redirect, read an answer
// without bound, wait without bound, or send to it again without end.
func TestSubmitToFakes(t *testing.T) {
	l := newLog(t, 9)
	ctx := context.Background()
	c := tlogwitness.NewClient(2 * time.Second)

	t.Run("first checkpoint, then one consistent with it", func(t *testing.T) {
		f := newFake(t, l, "fake.example")
		st, err := tlogwitness.Submit(ctx, c, f.witness, tlogwitness.State{}, l.tree, 4, l.note(t, 4))
		if err != nil {
			t.Fatal(err)
		}
		verifyKept(t, f, st, 4)
		st, err = tlogwitness.Submit(ctx, c, f.witness, st, l.tree, 9, l.note(t, 9))
		if err != nil {
			t.Fatal(err)
		}
		verifyKept(t, f, st, 9)
		if fmt.Sprint(f.olds) != "[0 4]" {
			t.Errorf("old sizes sent %v; want [0 4]", f.olds)
		}
	})
	t.Run("409: sent again from the witness's size", func(t *testing.T) {
		f := newFake(t, l, "fake.example")
		if _, err := tlogwitness.Submit(ctx, c, f.witness, tlogwitness.State{}, l.tree, 3, l.note(t, 3)); err != nil {
			t.Fatal(err)
		}
		// The service lost its state: it believes the witness holds
		// nothing.
		st, err := tlogwitness.Submit(ctx, c, f.witness, tlogwitness.State{}, l.tree, 7, l.note(t, 7))
		if err != nil {
			t.Fatal(err)
		}
		verifyKept(t, f, st, 7)
		if fmt.Sprint(f.olds) != "[0 0 3]" {
			t.Errorf("old sizes sent %v; want [0 0 3]", f.olds)
		}
	})

	fail := func(name string, misdo func(w http.ResponseWriter, r *http.Request, call int) bool, want func(error) bool) {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, l, "fake.example")
			f.misdo = misdo
			before := tlogwitness.State{Size: 0, Cosigned: "kept", Cosignature: "— kept\n"}
			st, err := tlogwitness.Submit(ctx, c, f.witness, before, l.tree, 5, l.note(t, 5))
			if err == nil || !want(err) {
				t.Fatalf("got %v", err)
			}
			if st.Cosigned != "kept" || st.Cosignature != "— kept\n" || st.Error == "" {
				t.Errorf("state after a failure %+v; want the cosignature kept before, and the error", st)
			}
			if st.Ahead != errors.Is(err, tlogwitness.ErrAhead) || st.IsAhead() != st.Ahead {
				t.Errorf("state after %v says ahead %v", err, st.Ahead)
			}
			if n := f.callCount(); n > 3 {
				t.Errorf("%d requests; at most 3", n)
			}
		})
	}
	status := func(code int) func(w http.ResponseWriter, r *http.Request, call int) bool {
		return func(w http.ResponseWriter, r *http.Request, call int) bool { http.Error(w, "no", code); return true }
	}
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	fail("404 unknown log", status(404), is(tlogwitness.ErrUnknownLog))
	fail("403 signature refused", status(403), is(tlogwitness.ErrForbidden))
	fail("422 inconsistent", status(422), is(tlogwitness.ErrInconsistent))
	fail("400 malformed", status(400), is(tlogwitness.ErrBadRequest))
	fail("500", status(500), func(err error) bool { var se *tlogwitness.StatusError; return errors.As(err, &se) && se.Code == 500 })
	fail("409 without its content type", func(w http.ResponseWriter, r *http.Request, call int) bool {
		w.WriteHeader(409)
		fmt.Fprint(w, "2\n")
		return true
	}, func(err error) bool { var se *tlogwitness.StatusError; return errors.As(err, &se) && se.Code == 409 })
	fail("409 with the size sent, again", func(w http.ResponseWriter, r *http.Request, call int) bool {
		w.Header().Set("Content-Type", "text/x.tlog.size")
		w.WriteHeader(409)
		fmt.Fprint(w, "0\n")
		return true
	}, func(err error) bool { return strings.Contains(err.Error(), "409 with the size it was sent") })
	fail("409 without end", func(w http.ResponseWriter, r *http.Request, call int) bool {
		w.Header().Set("Content-Type", "text/x.tlog.size")
		w.WriteHeader(409)
		fmt.Fprintf(w, "%d\n", call%3+1)
		return true
	}, func(err error) bool { return strings.Contains(err.Error(), "409 3 times") })
	fail("409 with a larger tree than the journal", func(w http.ResponseWriter, r *http.Request, call int) bool {
		w.Header().Set("Content-Type", "text/x.tlog.size")
		w.WriteHeader(409)
		fmt.Fprint(w, "1000\n")
		return true
	}, is(tlogwitness.ErrAhead))
	fail("a cosignature by another key", func(w http.ResponseWriter, r *http.Request, call int) bool {
		other := newFake(t, l, "fake.example") // same name, another key
		rec := httptest.NewRecorder()
		other.serve(rec, r)
		w.Write(rec.Body.Bytes())
		return true
	}, func(err error) bool { return strings.Contains(err.Error(), "no valid cosignature") })
	fail("a cosignature over another checkpoint", func(w http.ResponseWriter, r *http.Request, call int) bool {
		signed, _ := note.Sign(&note.Note{Text: strings.SplitN(string(l.note(t, 4)), "\n\n", 2)[0] + "\n"}, newFakeSigner(t, r))
		_, sig, _ := bytes.Cut(signed, []byte("\n\n"))
		w.Write(sig)
		return true
	}, func(err error) bool { return strings.Contains(err.Error(), "no valid cosignature") })
	fail("not signature lines", func(w http.ResponseWriter, r *http.Request, call int) bool {
		fmt.Fprint(w, "<html>hello</html>\n")
		return true
	}, func(err error) bool { return strings.Contains(err.Error(), "no signature") })
	fail("an empty 200", func(w http.ResponseWriter, r *http.Request, call int) bool { return true },
		func(err error) bool { return strings.Contains(err.Error(), "not signature lines") })
	fail("an answer without bound", func(w http.ResponseWriter, r *http.Request, call int) bool {
		w.Write(bytes.Repeat([]byte("— x AAAA\n"), tlogwitness.MaxResponse))
		return true
	}, func(err error) bool { return strings.Contains(err.Error(), "not read") })
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a redirect was followed to %s", r.URL)
	}))
	defer target.Close()
	fail("a redirect", func(w http.ResponseWriter, r *http.Request, call int) bool {
		http.Redirect(w, r, target.URL+"/add-checkpoint", http.StatusTemporaryRedirect)
		return true
	}, func(err error) bool { var se *tlogwitness.StatusError; return errors.As(err, &se) && se.Code == 307 })
	fail("a witness that does not answer", func(w http.ResponseWriter, r *http.Request, call int) bool {
		// Until the client gives up: its timeout is what is tested. The
		// body is read first, so the server notices the client leave
		// (it watches the connection only once the body is consumed).
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return true
	}, func(err error) bool {
		return strings.Contains(err.Error(), "Timeout") || strings.Contains(err.Error(), "deadline")
	})

	t.Run("a witness that is down", func(t *testing.T) {
		f := newFake(t, l, "fake.example")
		f.srv.Close()
		if _, err := tlogwitness.Submit(ctx, c, f.witness, tlogwitness.State{}, l.tree, 5, l.note(t, 5)); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("no proxy from the environment", func(t *testing.T) {
		if tr, ok := c.HTTP.Transport.(*http.Transport); !ok || tr.Proxy != nil {
			t.Fatal("the client's transport takes a proxy")
		}
	})
}

// newFakeSigner is the signer of a new key: a witness's cosignature the
// service does not know.
func newFakeSigner(t *testing.T, _ *http.Request) note.Signer {
	skey, _, err := note.GenerateKey(rand.Reader, "fake.example")
	if err != nil {
		t.Fatal(err)
	}
	s, err := fnote.NewSignerForCosignatureV1(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSubmitToOmniwitness: the transparency-dev witness, not written
// here, cosigns the log's checkpoints as it grows, from the size it holds
// after a 409, and refuses one of a rewritten tree and a forked view (the
// same size, another root); its cosignatures
// verify with receipts.VerifyCosignatures' libraries.
func TestSubmitToOmniwitness(t *testing.T) {
	l := newLog(t, 9)
	url, vkey := testservers.Omniwitness(t, "omniwitness.test", origin, l.vkey)
	v, err := fnote.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		t.Fatal(err)
	}
	w := tlogwitness.Witness{Name: "omniwitness.test", URL: url, Verifier: v}
	ctx := context.Background()
	c := tlogwitness.NewClient(5 * time.Second)
	st, err := tlogwitness.Submit(ctx, c, w, tlogwitness.State{}, l.tree, 3, l.note(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != 3 || st.Cosignature == "" {
		t.Fatalf("%+v", st)
	}
	st, err = tlogwitness.Submit(ctx, c, w, st, l.tree, 6, l.note(t, 6))
	if err != nil {
		t.Fatal(err)
	}
	// State lost: the witness's 409 says where it is.
	st, err = tlogwitness.Submit(ctx, c, w, tlogwitness.State{}, l.tree, 9, l.note(t, 9))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open([]byte(st.Cosigned+st.Cosignature), note.VerifierList(v)); err != nil || st.Size != 9 {
		t.Fatalf("%+v: %v", st, err)
	}
	// A rewritten log of the same origin and key: the witness, holding
	// 9, refuses its tree of 12.
	other := &logKit{key: l.key, vkey: l.vkey}
	var lines bytes.Buffer
	for i := range 12 {
		fmt.Fprintf(&lines, "{\"rewritten\":%d}\n", i)
	}
	if other.tree, err = receipts.TreeOf(&lines); err != nil {
		t.Fatal(err)
	}
	_, err = tlogwitness.Submit(ctx, c, w, st, other.tree, 12, other.note(t, 12))
	if !errors.Is(err, tlogwitness.ErrInconsistent) {
		t.Fatalf("a rewritten tree: %v; want ErrInconsistent", err)
	}
	// A forked view: another tree of the size it holds.
	if _, err = tlogwitness.Submit(ctx, c, w, st, other.tree, 9, other.note(t, 9)); !errors.Is(err, tlogwitness.ErrInconsistent) {
		t.Fatalf("another tree of the same size: %v; want ErrInconsistent", err)
	}
	// A note the runner key did not sign. The spec says 403; this
	// version answers 500 (its log.ParseCheckpoint error is not its
	// ErrNoValidSignature, which it maps to 403). Either way nothing is
	// kept.
	stranger := newLog(t, 9)
	after, err := tlogwitness.Submit(ctx, c, w, st, stranger.tree, 9, stranger.note(t, 9))
	var se *tlogwitness.StatusError
	if !errors.As(err, &se) || se.Code != 403 && se.Code != 500 || after.Cosignature != st.Cosignature {
		t.Fatalf("another key's note: %v; want a 403 (or this version's 500), the cosignature before kept", err)
	}
}
