package dynamo

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/prod-write/prod-write/pkg/store"
)

// File content a plan binds is kept in parts, each an item well under
// DynamoDB's 400 KB, and a last item that says how many there are:
//
//	pk            sk        attributes
//	content#HEX   part#N    b: bytes N·contentPart onwards
//	content#HEX   content   n: how many parts
//
// Each item is written by a PutItem conditioned on attribute_not_exists,
// the count last, so content is only ever read whole
// (docs/adr/0063-file-content-kept-with-the-plan.md).
const (
	contentPart = 256 << 10
	attrBytes   = "b"
	contentSK   = "content"
)

func contentPK(sum string) string { return "content#" + sum[len("sha256:"):] }

// PutContent implements [store.Store].
func (s *Store) PutContent(sum string, data []byte) error {
	if err := store.CheckContent(sum, data); err != nil {
		return err
	}
	pk := contentPK(sum)
	parts := 0
	for off := 0; off == 0 || off < len(data); off += contentPart {
		part := data[off:min(off+contentPart, len(data))]
		item := key(pk, "part#"+strconv.Itoa(parts))
		item[attrBytes] = &types.AttributeValueMemberB{Value: part}
		if err := s.putItemOnce(item, func(old map[string]types.AttributeValue) bool {
			b, ok := old[attrBytes].(*types.AttributeValueMemberB)
			return ok && bytes.Equal(b.Value, part)
		}); err != nil {
			return err
		}
		parts++
	}
	item := key(pk, contentSK)
	item[attrN] = &types.AttributeValueMemberN{Value: strconv.Itoa(parts)}
	return s.putItemOnce(item, func(old map[string]types.AttributeValue) bool {
		n, ok := old[attrN].(*types.AttributeValueMemberN)
		return ok && n.Value == strconv.Itoa(parts)
	})
}

// putItemOnce creates item unless its key exists, by a PutItem conditioned
// on attribute_not_exists: an existing item that same finds equal is
// success, any other store.ErrExists. Every item of the store is written so.
func (s *Store) putItemOnce(item map[string]types.AttributeValue, same func(map[string]types.AttributeValue) bool) error {
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(s.table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if err == nil {
		return nil
	}
	if !conditionFailed(err) {
		return s.fail("PutItem", err)
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: map[string]types.AttributeValue{attrPK: item[attrPK], attrSK: item[attrSK]}, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return s.fail("GetItem", err)
	}
	if out.Item != nil && same(out.Item) {
		return nil
	}
	pk, _ := item[attrPK].(*types.AttributeValueMemberS)
	sk, _ := item[attrSK].(*types.AttributeValueMemberS)
	return fmt.Errorf("%s: %w", s.path(pk.Value, sk.Value), store.ErrExists)
}

// Content implements [store.Store]: the parts in order, only when the
// count item says they are all there.
func (s *Store) Content(sum string) ([]byte, error) {
	if err := store.CheckFingerprint(sum); err != nil {
		return nil, fmt.Errorf("content sum: %w", err)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	pk := contentPK(sum)
	parts := map[int][]byte{}
	count, size := -1, 0
	var bad error
	err := s.query(ctx, pk, func(page *dynamodb.QueryOutput) {
		for _, item := range page.Items {
			sk, _ := item[attrSK].(*types.AttributeValueMemberS)
			switch {
			case sk == nil:
				bad = errors.New("an item without a string sort key")
			case sk.Value == contentSK:
				n, ok := item[attrN].(*types.AttributeValueMemberN)
				if c, err := strconv.Atoi(valueOf(n, ok)); err == nil && c > 0 && c <= store.MaxContent/contentPart+1 {
					count = c
				} else {
					bad = fmt.Errorf("%s: no part count", s.path(pk, sk.Value))
				}
			default:
				digits, part := strings.CutPrefix(sk.Value, "part#")
				i, err := strconv.Atoi(digits)
				b, ok := item[attrBytes].(*types.AttributeValueMemberB)
				if !part || err != nil || !ok || len(b.Value) > contentPart || sk.Value != "part#"+strconv.Itoa(i) {
					bad = fmt.Errorf("%s: not a part this store wrote", s.path(pk, sk.Value))
					continue
				}
				parts[i] = b.Value
				size += len(b.Value)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	if count < 0 {
		return nil, fmt.Errorf("content %.19s…: %w", sum, store.ErrNotFound)
	}
	if len(parts) != count || size > store.MaxContent {
		return nil, fmt.Errorf("%s: %d parts kept of %d", s.path(pk, contentSK), len(parts), count)
	}
	out := make([]byte, 0, size)
	for i := range count {
		b, ok := parts[i]
		if !ok {
			return nil, fmt.Errorf("%s: part %d is missing", s.path(pk, contentSK), i)
		}
		out = append(out, b...)
	}
	return out, nil
}

func valueOf(n *types.AttributeValueMemberN, ok bool) string {
	if !ok || n == nil {
		return ""
	}
	return n.Value
}
