package archive

import (
	"context"
	"path"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Chains lists the journals the archive holds: every key prefix under
// its own that directly holds receipt objects (PREFIX/SEQ-HASH.json), as
// s3://bucket/prefix URLs in key order. The archive's own prefix is one
// when it holds receipts itself (a host's prefix); the parent of the
// hosts' prefixes (receipts/, or the bucket) holds several. None at all
// is an empty list, not an error: the caller decides (docs/DISTRIBUTED.md,
// "Replaying the fleet").
func (a *Archive) Chains(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	err := a.each(ctx, func(o types.Object) error {
		dir, name := path.Split(aws.ToString(o.Key))
		if nameRE().MatchString(name) {
			seen[dir] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for dir := range seen {
		out = append(out, "s3://"+a.bucket+"/"+dir[:max(0, len(dir)-1)])
	}
	sort.Strings(out)
	return out, nil
}
