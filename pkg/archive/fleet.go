package archive

import (
	"context"
	"path"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
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
	pages := a.pages()
	for pages.HasMorePages() {
		pctx, cancel := context.WithTimeout(ctx, a.timeout)
		page, err := pages.NextPage(pctx)
		cancel()
		if err != nil {
			return nil, a.fail("ListObjectsV2", a.prefix, err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			dir, name := path.Split(key)
			if nameRE().MatchString(name) {
				seen[dir] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for dir := range seen {
		out = append(out, "s3://"+a.bucket+"/"+dir[:max(0, len(dir)-1)])
	}
	sort.Strings(out)
	return out, nil
}
