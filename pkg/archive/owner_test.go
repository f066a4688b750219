package archive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// journalOf writes n receipts signed as runner on host to a new journal
// and returns its path and lines.
func journalOf(t *testing.T, runner, host string, n int) (string, [][]byte) {
	t.Helper()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	j := &receipts.Journal{Path: filepath.Join(t.TempDir(), "receipts.jsonl"), Key: k, Runner: runner, Host: host}
	for i := range n {
		if _, err := j.Append(&receipts.Receipt{Kind: receipts.KindRepair, RunID: fmt.Sprintf("%s-%d", host, i), Repair: &receipts.Repair{Dropped: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(j.Path)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		lines = append(lines, []byte(l))
	}
	return j.Path, lines
}

func entries(lines [][]byte) []Entry {
	var out []Entry
	for i, l := range lines {
		out = append(out, Entry{Seq: uint64(i + 1), Hash: receipts.LineHash(l)})
	}
	return out
}

// A host given another host's prefix is refused, by Ship (what run does)
// and by Sync, and nothing of its journal lands there; the owner itself
// keeps shipping.
func TestAHostCannotShipIntoAnothersPrefix(t *testing.T) {
	s := s3Server(t)
	bucket := s.bucket(t, true)
	ctx := context.Background()
	pathA, linesA := journalOf(t, "runner-a", "host-a", 2)
	pathB, linesB := journalOf(t, "runner-b", "host-b", 3)
	a := s.open(t, Config{Bucket: bucket, Prefix: "receipts/host-a"})
	if err := a.Ship(ctx, pathA, entries(linesA[:1])...); err != nil {
		t.Fatalf("the owner's first Ship: %v", err)
	}

	var foreign *ForeignError
	if err := a.Ship(ctx, pathB, entries(linesB)...); !errors.As(err, &foreign) || foreign.Owner.Runner != "runner-a" || foreign.Self.Runner != "runner-b" {
		t.Fatalf("Ship of host-b's receipts into host-a's prefix: %v, want a *ForeignError", err)
	}
	f, _ := os.Open(pathB)
	defer f.Close()
	if _, err := a.Sync(ctx, f); !errors.As(err, &foreign) {
		t.Fatalf("Sync of host-b's journal into host-a's prefix: %v, want a *ForeignError", err)
	}
	if n := s.countReceipts(t, bucket, "receipts/host-a"); n != 1 {
		t.Fatalf("%d receipts under host-a's prefix, want only host-a's 1", n)
	}
	if err := a.Ship(ctx, pathA, entries(linesA)[1:]...); err != nil {
		t.Fatalf("the owner's next Ship: %v", err)
	}
}

// A prefix shipped to before owner objects existed belongs to whoever
// signed its first receipt.
func TestClaimOfAPrefixWithoutOwner(t *testing.T) {
	s := s3Server(t)
	a := s.open(t, Config{Bucket: s.bucket(t, false), Prefix: "receipts/host-a"})
	ctx := context.Background()
	_, linesA := journalOf(t, "runner-a", "host-a", 1)
	if err := a.Put(ctx, 1, linesA[0]); err != nil { // Put claims nothing: as an old prod-write shipped
		t.Fatal(err)
	}
	var foreign *ForeignError
	if err := a.Claim(ctx, Owner{Runner: "runner-b", Host: "host-b"}); !errors.As(err, &foreign) || foreign.Owner != (Owner{Runner: "runner-a", Host: "host-a"}) {
		t.Fatalf("Claim by another host: %v, want a *ForeignError naming runner-a", err)
	}
	if err := a.Claim(ctx, Owner{Runner: "runner-a", Host: "host-a"}); err != nil {
		t.Fatalf("Claim by the owner: %v", err)
	}
}

// Of hosts racing to claim one empty prefix, exactly one owns it: every
// claim by it succeeds and every other is refused.
func TestClaimRace(t *testing.T) {
	s := s3Server(t)
	a := s.open(t, Config{Bucket: s.bucket(t, true), Prefix: "receipts/x"})
	const racers = 12
	errs := make([]error, racers)
	owners := make([]Owner, racers)
	var wg sync.WaitGroup
	for i := range racers {
		owners[i] = Owner{Runner: fmt.Sprintf("runner-%d", i%3), Host: fmt.Sprintf("host-%d", i%3)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.Claim(context.Background(), owners[i])
		}()
	}
	wg.Wait()
	var winner *Owner
	for i, err := range errs {
		if err == nil {
			if winner != nil && *winner != owners[i] {
				t.Fatalf("both %v and %v own the prefix", *winner, owners[i])
			}
			winner = &owners[i]
		}
	}
	if winner == nil {
		t.Fatalf("nobody owns the prefix: %v", errs)
	}
	for i, err := range errs {
		var foreign *ForeignError
		if owners[i] != *winner && !errors.As(err, &foreign) {
			t.Errorf("claim by %v: %v, want a *ForeignError", owners[i], err)
		}
	}
}

// Sync compares bytes, not names: each thing shipping never writes is a
// *TamperError of its kind, not "present", and the rest still ships.
func TestSyncReportsTampering(t *testing.T) {
	s := s3Server(t)
	ctx := context.Background()
	for _, tc := range []struct {
		kind  string
		plant func(t *testing.T, bucket string, a *Archive, lines [][]byte)
	}{
		{"duplicate", func(t *testing.T, bucket string, a *Archive, lines [][]byte) {
			// Another host's seq 2 beside this one's.
			_, other := journalOf(t, "runner-b", "host-b", 2)
			s.put(t, bucket, a.Key(2, other[1]), other[1])
		}},
		{"foreign", func(t *testing.T, bucket string, a *Archive, lines [][]byte) {
			// An entry the journal does not have (yet, or ever).
			_, other := journalOf(t, "runner-b", "host-b", 5)
			s.put(t, bucket, a.Key(5, other[4]), other[4])
		}},
		{"foreign", func(t *testing.T, bucket string, a *Archive, lines [][]byte) {
			s.put(t, bucket, a.prefix+"notes.txt", []byte("hello"))
		}},
		{"overwritten", func(t *testing.T, bucket string, a *Archive, lines [][]byte) {
			// The name of line 1, other bytes: an unlocked bucket lets a
			// plain PutObject replace it.
			s.put(t, bucket, a.Key(1, lines[0]), []byte(strings.Replace(string(lines[0]), `"`, ` "`, 1)))
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			bucket := s.bucket(t, false)
			a := s.open(t, Config{Bucket: bucket, Prefix: "receipts/host-a"})
			path, lines := journalOf(t, "runner-a", "host-a", 3)
			if err := a.Ship(ctx, path, entries(lines[:2])...); err != nil {
				t.Fatal(err)
			}
			if res, err := syncFile(t, a, path); err != nil || res != (SyncResult{Lines: 3, Shipped: 1, Present: 2}) {
				t.Fatalf("Sync before tampering: %+v, %v", res, err)
			}
			tc.plant(t, bucket, a, lines)
			_, err := syncFile(t, a, path)
			var tamper *TamperError
			if !errors.As(err, &tamper) || tamper.Kind != tc.kind {
				t.Fatalf("Sync after a %s object: %v, want a *TamperError of that kind", tc.kind, err)
			}
		})
	}
}

// Chains names every prefix that directly holds receipts, under the
// archive's own; objects that are not receipts name none.
func TestChains(t *testing.T) {
	s := s3Server(t)
	bucket := s.bucket(t, false)
	for _, key := range []string{
		"receipts/host-a/" + fmt.Sprintf("%012d-%064x.json", 1, 1),
		"receipts/host-a/" + fmt.Sprintf("%012d-%064x.json", 2, 2),
		"receipts/host-a/" + OwnerName,
		"receipts/eu/host-b/" + fmt.Sprintf("%012d-%064x.json", 1, 3),
		"receipts/host-c/notes.txt",
		"other/" + fmt.Sprintf("%012d-%064x.json", 1, 4),
	} {
		s.put(t, bucket, key, []byte("x"))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"receipts", []string{"receipts/eu/host-b", "receipts/host-a"}},
		{"receipts/host-a", []string{"receipts/host-a"}},
		{"", []string{"other", "receipts/eu/host-b", "receipts/host-a"}},
		{"receipts/host-c", nil},
		{"receipts/host-nonexistent", nil},
		{"receipts/host", nil},
	} {
		got, err := s.open(t, Config{Bucket: bucket, Prefix: tc.prefix}).Chains(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, p := range tc.want {
			want = append(want, "s3://"+bucket+"/"+p)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Chains under %q = %v, want %v", tc.prefix, got, want)
		}
	}
}

func (s *server) put(t *testing.T, bucket, key string, body []byte) {
	t.Helper()
	if _, err := s.admin.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(string(body))}); err != nil {
		t.Fatal(err)
	}
}

func (s *server) countReceipts(t *testing.T, bucket, prefix string) int {
	t.Helper()
	out, err := s.admin.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix + "/000")})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Contents)
}
