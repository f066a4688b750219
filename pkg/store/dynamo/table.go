package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CreateTable creates the store's table if it does not exist, on demand
// capacity (PAY_PER_REQUEST), and waits until it is ACTIVE, at most wait.
// It is idempotent: an existing table with the store's key schema is
// success (created is then false); one with another key schema is an
// error, never altered.
func (s *Store) CreateTable(ctx context.Context, wait time.Duration) (created bool, err error) {
	callCtx, cancel := context.WithTimeout(ctx, s.timeout)
	_, err = s.client.CreateTable(callCtx, &dynamodb.CreateTableInput{
		TableName: aws.String(s.table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	cancel()
	var inUse *types.ResourceInUseException
	switch {
	case err == nil:
		created = true
	case errors.As(err, &inUse):
		// It exists (or is being created by a concurrent init).
	default:
		return false, s.fail("CreateTable", err)
	}
	waiter := dynamodb.NewTableExistsWaiter(s.client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = 2 * time.Second
	})
	out, err := waiter.WaitForOutput(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)}, wait)
	if err != nil {
		return created, s.fail("DescribeTable", err)
	}
	if err := checkSchema(out.Table); err != nil {
		return created, fmt.Errorf("dynamodb table %q exists but is not a prod-write store: %w", s.table, err)
	}
	return created, nil
}

// checkSchema reports whether t is keyed as the store needs: pk (string)
// hash, sk (string) range.
func checkSchema(t *types.TableDescription) error {
	if t == nil {
		return errors.New("no table description")
	}
	want := map[string]types.KeyType{attrPK: types.KeyTypeHash, attrSK: types.KeyTypeRange}
	if len(t.KeySchema) != len(want) {
		return fmt.Errorf("key schema has %d attributes, want pk (hash) and sk (range)", len(t.KeySchema))
	}
	for _, k := range t.KeySchema {
		if k.AttributeName == nil || want[*k.AttributeName] != k.KeyType {
			return fmt.Errorf("key schema %s %s, want pk (hash) and sk (range)", aws.ToString(k.AttributeName), k.KeyType)
		}
	}
	for _, a := range t.AttributeDefinitions {
		if _, key := want[aws.ToString(a.AttributeName)]; key && a.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("key attribute %s has type %s, want S (string)", aws.ToString(a.AttributeName), a.AttributeType)
		}
	}
	return nil
}
