package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/prod-write/prod-write/receipts"
)

// OwnerName is the object, under a host's prefix, that says whose chain
// the prefix holds. It is written once, with If-None-Match: *, by the
// first host to ship there (docs/adr/0016-one-host-per-prefix.md).
const OwnerName = "runner.json"

// Owner is whose journal a prefix holds: the runner principal that signs
// its receipts and the host it names (prod-write.toml's host). The
// principal, not its key, so that rotating a runner's key keeps its
// prefix; the host, so that two hosts that share a runner principal still
// cannot share a prefix.
type Owner struct {
	Runner string `json:"runner"`
	Host   string `json:"host"`
}

func (o Owner) String() string {
	if o.Host == "" {
		return "runner " + o.Runner
	}
	return fmt.Sprintf("runner %s on host %s", o.Runner, o.Host)
}

// OwnerOf is the owner that journal line names, ok false when the line is
// not a receipt (such lines prove no one's chain).
func OwnerOf(line []byte) (Owner, bool) {
	_, r, err := receipts.Decode(line)
	if err != nil || r.Runner == "" {
		return Owner{}, false
	}
	return Owner{Runner: r.Runner, Host: r.Host}, true
}

// ForeignError is a refusal to ship into a prefix that holds another
// host's chain: its receipts would interleave with that chain, and object
// lock would make the mix permanent.
type ForeignError struct {
	URL   string
	Owner Owner // whose chain the prefix holds
	Self  Owner // who tried to ship
}

func (e *ForeignError) Error() string {
	return fmt.Sprintf("%s holds the receipts of %s, not of %s: each host ships to its own prefix (receipts/<host>); nothing was shipped", e.URL, e.Owner, e.Self)
}

// Claim makes sure the prefix holds self's chain, refusing with a
// [*ForeignError] when it holds another's. The first host to ship claims
// the prefix by writing [OwnerName] with If-None-Match: *, so of two hosts
// racing for an empty prefix exactly one wins. A prefix written before
// owners existed belongs to whoever signed its first receipt.
func (a *Archive) Claim(ctx context.Context, self Owner) error {
	key := a.prefix + OwnerName
	owner, found, err := a.readOwner(ctx, key)
	if err != nil {
		return err
	}
	if !found {
		// No owner object: an empty prefix, or one from before owners.
		if first, ok, err := a.firstOwner(ctx); err != nil {
			return err
		} else if ok && first != self {
			return &ForeignError{URL: a.URL(), Owner: first, Self: self}
		}
		body, _ := json.Marshal(self)
		err := a.putOnce(ctx, key, body, false)
		switch {
		case err == nil:
			return nil
		case httpStatus(err) == 412 || httpStatus(err) == 409:
			// Another host claimed it at the same moment: judge by what
			// is there now.
			if owner, found, err = a.readOwner(ctx, key); err != nil {
				return err
			}
			if !found {
				return a.fail("PutObject", key, err)
			}
		default:
			return a.fail("PutObject", key, err)
		}
	}
	if owner != self {
		return &ForeignError{URL: a.URL(), Owner: owner, Self: self}
	}
	return nil
}

// readOwner reads the owner object at key; found is false when there is
// none.
func (a *Archive) readOwner(ctx context.Context, key string) (Owner, bool, error) {
	b, found, err := a.read(ctx, key, 4<<10)
	if err != nil || !found {
		return Owner{}, false, err
	}
	var o Owner
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil || o.Runner == "" {
		return Owner{}, false, &TamperError{Key: key, Kind: "foreign", Msg: "the prefix's owner object is not one prod-write wrote"}
	}
	return o, true, nil
}

// firstOwner is the owner named by the prefix's first receipt, if any.
func (a *Archive) firstOwner(ctx context.Context) (Owner, bool, error) {
	lctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	out, err := a.client.ListObjectsV2(lctx, &s3.ListObjectsV2Input{Bucket: aws.String(a.bucket), Prefix: aws.String(a.prefix + fmt.Sprintf("%012d-", 1)), MaxKeys: aws.Int32(1)})
	if err != nil {
		return Owner{}, false, a.fail("ListObjectsV2", a.prefix, err)
	}
	if len(out.Contents) == 0 {
		return Owner{}, false, nil
	}
	key := aws.ToString(out.Contents[0].Key)
	b, found, err := a.read(ctx, key, 64<<20)
	if err != nil || !found {
		return Owner{}, false, err
	}
	o, ok := OwnerOf(b)
	return o, ok, nil
}

// read gets the object at key, at most max bytes of it; found is false
// when there is none.
func (a *Archive) read(ctx context.Context, key string, max int64) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	out, err := a.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(a.bucket), Key: aws.String(key)})
	if httpStatus(err) == 404 || apiCode(err) == "NoSuchKey" {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, a.fail("GetObject", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, max))
	if err != nil {
		return nil, false, a.fail("GetObject", key, err)
	}
	return b, true, nil
}

// TamperError is what sync finds in the archive that shipping never
// writes: an object under the prefix that is not a receipt of this
// journal (foreign), two objects for one sequence number (duplicate), or
// an object whose bytes are not those its name promises (overwritten).
type TamperError struct {
	Key  string
	Kind string // foreign, duplicate or overwritten
	Msg  string
}

func (e *TamperError) Error() string {
	return fmt.Sprintf("archive object %s: %s: %s", e.Key, e.Kind, e.Msg)
}
