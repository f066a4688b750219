package dynamo

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/pkg/store/storetest"
	"github.com/prod-write/prod-write/pkg/testservers"
)

// A consumption whose condition fails on a counter item that is neither
// spent nor this run's (here its count is not a number: an item another
// tool wrote, or a table shared by mistake) is an error, never "consumed":
// the store cannot say that every use is spent, so it says nothing it
// cannot prove (docs/adr/0015-idempotent-consumption.md).
func TestConditionFailedOnAnItemNeitherSpentNorThisRunsIsNoConsumption(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{
		Table: testservers.Name("pw"), Region: testservers.Region, Endpoint: testservers.Dynalite(t),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	if created, err := s.CreateTable(ctx, 30*time.Second); err != nil || !created {
		t.Fatalf("CreateTable = %v, %v", created, err)
	}
	id := storetest.ID("neither")
	item := key(consumedPK(id), countSK)
	item[attrN] = &types.AttributeValueMemberS{Value: "three"}
	if _, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Consume(id, 3, storetest.NewRun())
	if err == nil || errors.Is(err, store.ErrConsumed) {
		t.Fatalf("Consume on a counter neither spent nor this run's: %v, want an error that is not ErrConsumed", err)
	}
}
