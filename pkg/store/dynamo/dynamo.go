// Package dynamo is the DynamoDB backend of [store.Store] (docs/DESIGN.md §10): plans,
// evidence and consumption in one table shared by every runner host, so
// that an approval is spent exactly once however many hosts race for it.
//
// # Table
//
// One table with a string partition key pk and a string sort key sk
// (docs/DISTRIBUTED.md has the whole layout):
//
//	pk                    sk            attributes
//	plan#HEX              plan          env: the signed plan (DSSE JSON)
//	evidence#HEX          ID            env: a record bound to sha256:HEX
//	                                    (or P's break-glass records and reviews, HEX of store.BreakGlassKey(P))
//	consumed#ID           count         n: uses spent; rRUN: the slot run RUN took; tRUN: when
//
// # Guarantees
//
// Every plan and record is written by a PutItem conditioned on
// attribute_not_exists(pk): nothing is ever overwritten. A use is spent by
// one conditional increment of the record's counter that also records the
// run, so of any number of concurrent consumers exactly uses succeed, and a
// retried increment never spends twice ([Store.Consume]). Every read is strongly consistent
// (ConsistentRead), so the gate never judges by a stale view: a use spent
// on one host is seen by the next read on any other.
//
// # Failing closed
//
// Any failed DynamoDB call is returned as an [*Error]; no method ever turns
// one into an answer such as "not found" or "not consumed". Each call has a
// budget of [DefaultTimeout] with three attempts, so an unreachable service
// fails a run within seconds (docs/DISTRIBUTED.md).
package dynamo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prod-write/prod-write/pkg/dsse"

	"github.com/prod-write/prod-write/pkg/awsconf"
	"github.com/prod-write/prod-write/pkg/store"
)

// Attribute names.
const (
	attrPK  = "pk"
	attrSK  = "sk"
	attrEnv = "env"
	attrN   = "n"
)

// countSK is the sort key of a record's counter item under consumed#ID.
const countSK = "count"

// maxUnprocessed bounds the BatchGetItem requests Used makes for keys the
// service left unprocessed (throttling): past it Used fails closed.
const maxUnprocessed = 5

// The retry and timeout budget. The gate sits in front of a production
// write: with DynamoDB unreachable, run must refuse within seconds, not
// wait out the SDK's default retries (docs/DISTRIBUTED.md, "Failing
// closed").
const (
	// DefaultTimeout bounds one Store call, retries included.
	DefaultTimeout = 10 * time.Second
	requestTimeout = 5 * time.Second
)

// Options say which table to use and how to reach it. Credentials come
// from the standard AWS chain unless Credentials is set.
type Options struct {
	Table string
	// Region overrides the chain's region (AWS_REGION, shared config).
	Region string
	// Endpoint overrides the service endpoint, for local servers such as
	// dynalite: http(s)://host[:port].
	Endpoint string
	// Timeout bounds each Store call, retries included; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Credentials, when not nil, replace the standard chain.
	Credentials aws.CredentialsProvider
	// Isolated builds the client from these options only, reading no AWS
	// setting from the environment or $HOME/.aws: prod-write sets it when
	// it runs with more privilege than its caller ([awsconf]).
	Isolated bool
}

// validTable reports whether name is a DynamoDB table name: 3 to 255 of
// A-Z a-z 0-9 _ . - (a loop, not a regexp: a bounded repetition compiles
// into hundreds of states at every start of prod-write).
func validTable(name string) bool {
	if len(name) < 3 || len(name) > 255 {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Store is the DynamoDB store. Its methods are safe for concurrent use.
type Store struct {
	client  *dynamodb.Client
	creds   aws.CredentialsProvider
	table   string
	timeout time.Duration
}

var _ store.Store = (*Store)(nil)

// Open returns the store for o.Table. It does not contact DynamoDB: a
// missing table or an unreachable service shows in the first call.
func Open(ctx context.Context, o Options) (*Store, error) {
	if !validTable(o.Table) {
		return nil, fmt.Errorf("DynamoDB table name %q: want 3 to 255 letters, digits, '_', '-' or '.'", o.Table)
	}
	if err := awsconf.CheckEndpoint(o.Endpoint); err != nil {
		return nil, err
	}
	cfg, err := awsconf.Load(ctx, awsconf.Options{Region: o.Region, Credentials: o.Credentials, Isolated: o.Isolated, RequestTimeout: requestTimeout})
	if err != nil {
		return nil, err
	}
	client := dynamodb.NewFromConfig(cfg, func(d *dynamodb.Options) {
		if o.Endpoint != "" {
			d.BaseEndpoint = aws.String(o.Endpoint)
		}
	})
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Store{client: client, creds: cfg.Credentials, table: o.Table, timeout: timeout}, nil
}

// Table is the table's name.
func (s *Store) Table() string { return s.table }

func (s *Store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(pk), attrSK: str(sk)}
}

func planPK(fp string) string     { return "plan#" + fp[len("sha256:"):] }
func evidencePK(fp string) string { return "evidence#" + fp[len("sha256:"):] }
func consumedPK(id string) string { return "consumed#" + id }
func (s *Store) path(pk, sk string) string {
	return fmt.Sprintf("dynamodb://%s/%s/%s", s.table, pk, sk)
}

// encode is the stored form of an envelope. The embedded store keeps the
// same JSON (plus a newline) in its files.
func encode(env *dsse.Envelope) (string, error) {
	b, err := json.Marshal(env)
	return string(b), err
}

// decode reads a stored envelope as strictly as the embedded store does.
func decode(path, data string) (*dsse.Envelope, error) {
	var env dsse.Envelope
	dec := json.NewDecoder(bytes.NewReader([]byte(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("%s: not a DSSE envelope: %w", path, err)
	}
	if env.PayloadType == "" || env.Payload == "" || len(env.Signatures) == 0 {
		return nil, fmt.Errorf("%s: not a DSSE envelope: missing payloadType, payload or signatures", path)
	}
	return &env, nil
}

// conditionFailed reports whether err is the failure of an
// attribute_not_exists condition: the item is there already.
func conditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// putOnce creates the item pk/sk with env unless it exists; an existing
// item with the same bytes is success, with other bytes (or an item that is
// not the store's, as the embedded store treats a file it cannot read back)
// store.ErrExists.
func (s *Store) putOnce(pk, sk, env string) error {
	item := key(pk, sk)
	item[attrEnv] = str(env)
	return s.putItemOnce(item, func(old map[string]types.AttributeValue) bool {
		v, ok := old[attrEnv].(*types.AttributeValueMemberS)
		return ok && v.Value == env
	})
}

// getEnv reads the env attribute of pk/sk, strongly consistent.
func (s *Store) getEnv(ctx context.Context, pk, sk string) (string, bool, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            key(pk, sk),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return "", false, s.fail("GetItem", err)
	}
	if out.Item == nil {
		return "", false, nil
	}
	v, ok := out.Item[attrEnv].(*types.AttributeValueMemberS)
	if !ok {
		return "", true, fmt.Errorf("%s: no %s string attribute", s.path(pk, sk), attrEnv)
	}
	return v.Value, true, nil
}

// PutPlan implements [store.Store].
func (s *Store) PutPlan(fp string, env *dsse.Envelope) error {
	if err := store.CheckFingerprint(fp); err != nil {
		return err
	}
	data, err := encode(env)
	if err != nil {
		return err
	}
	return s.putOnce(planPK(fp), "plan", data)
}

// GetPlan implements [store.Store].
func (s *Store) GetPlan(fp string) (*dsse.Envelope, error) {
	if err := store.CheckFingerprint(fp); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	pk := planPK(fp)
	data, found, err := s.getEnv(ctx, pk, "plan")
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("plan %s: %w", fp, store.ErrNotFound)
	}
	return decode(s.path(pk, "plan"), data)
}

// PutEvidence implements [store.Store].
func (s *Store) PutEvidence(fp, id string, env *dsse.Envelope) error {
	if err := store.CheckFingerprint(fp); err != nil {
		return err
	}
	if err := store.CheckID(id); err != nil {
		return err
	}
	data, err := encode(env)
	if err != nil {
		return err
	}
	return s.putOnce(evidencePK(fp), id, data)
}

// query calls fn with each page of the strongly consistent query of the
// items under pk.
func (s *Store) query(ctx context.Context, pk string, fn func(*dynamodb.QueryOutput)) error {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk)},
		ConsistentRead:            aws.Bool(true),
	}
	pages := dynamodb.NewQueryPaginator(s.client, in)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return s.fail("Query", err)
		}
		fn(out)
	}
	return nil
}

// Evidence implements [store.Store]. An item that is not a record this
// store wrote is reported as a problem at dynamodb://TABLE/PK/SK and
// skipped.
func (s *Store) Evidence(fp string) ([]*dsse.Envelope, []store.Problem, error) {
	if err := store.CheckFingerprint(fp); err != nil {
		return nil, nil, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	pk := evidencePK(fp)
	var out []*dsse.Envelope
	var problems []store.Problem
	err := s.query(ctx, pk, func(page *dynamodb.QueryOutput) {
		for _, item := range page.Items {
			sk, _ := item[attrSK].(*types.AttributeValueMemberS)
			if sk == nil {
				problems = append(problems, store.Problem{Path: s.path(pk, "?"), Err: "item without a string sort key"})
				continue
			}
			path := s.path(pk, sk.Value)
			if store.CheckID(sk.Value) != nil {
				problems = append(problems, store.Problem{Path: path, Err: "foreign item: not a record this store wrote"})
				continue
			}
			v, ok := item[attrEnv].(*types.AttributeValueMemberS)
			if !ok {
				problems = append(problems, store.Problem{Path: path, Err: "no " + attrEnv + " string attribute"})
				continue
			}
			env, err := decode(path, v.Value)
			if err != nil {
				problems = append(problems, store.Problem{Path: path, Err: err.Error()})
				continue
			}
			out = append(out, env)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return out, problems, nil
}

// Consume implements [store.Store] with one request: a conditional
// increment of the record's counter item consumed#ID / count, which
// records, in the same atomic write, the slot this run took (attribute
// rRUN, the count before the increment) and when (tRUN):
//
//	SET n = if_not_exists(n, 0) + 1, rRUN = if_not_exists(n, 0), tRUN = :at
//	IF (attribute_not_exists(n) OR n < :uses) AND attribute_not_exists(rRUN)
//
// The increment is serialised by DynamoDB, so of any number of concurrent
// runs each gets its own slot and no write fails while a use is left: no
// slot is tried and lost, and nothing is counted first. When the condition
// fails the item as it was (ReturnValuesOnConditionCheckFailure ALL_OLD,
// or, where the service does not return it, a strongly consistent read)
// says why: if it holds rRUN this very run already took a slot (the SDK
// retried a write whose reply was lost) and that slot is the answer;
// otherwise every use is spent by other runs (docs/adr/0015-idempotent-consumption.md).
func (s *Store) Consume(id string, uses int, run string) (int, error) {
	if err := store.CheckID(id); err != nil {
		return 0, err
	}
	if err := store.CheckRunID(run); err != nil {
		return 0, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	k := key(consumedPK(id), countSK)
	names := map[string]string{"#n": attrN, "#r": runAttr(run), "#t": "t" + run}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      k,
		UpdateExpression:         aws.String("SET #n = if_not_exists(#n, :zero) + :one, #r = if_not_exists(#n, :zero), #t = :at"),
		ConditionExpression:      aws.String("(attribute_not_exists(#n) OR #n < :uses) AND attribute_not_exists(#r)"),
		ExpressionAttributeNames: names,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":zero": num(0), ":one": num(1), ":uses": num(uses),
			":at": str(time.Now().UTC().Format(time.RFC3339Nano)),
		},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		slot, ok := number(out.Attributes[runAttr(run)])
		if !ok {
			return 0, fmt.Errorf("%s: UpdateItem returned no slot for run %s", s.path(consumedPK(id), countSK), run)
		}
		return slot, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return 0, s.fail("UpdateItem", err)
	}
	old := ccf.Item
	if old == nil {
		// The service did not return the item (dynalite does not): read
		// it. Only this run writes rRUN, so the read cannot miss it.
		got, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:                aws.String(s.table),
			Key:                      k,
			ConsistentRead:           aws.Bool(true),
			ProjectionExpression:     aws.String("#n, #r"),
			ExpressionAttributeNames: map[string]string{"#n": attrN, "#r": runAttr(run)},
		})
		if err != nil {
			return 0, s.fail("GetItem", err)
		}
		old = got.Item
	}
	if slot, ok := number(old[runAttr(run)]); ok {
		return slot, nil // this run's own write, whose reply was lost
	}
	if n, ok := number(old[attrN]); ok && n >= uses {
		return 0, store.Consumed(id, uses)
	}
	// The condition failed, yet the item is neither spent nor this run's:
	// never an answer, so not "consumed" either.
	return 0, fmt.Errorf("%s: the conditional increment failed but the item (n=%v) is neither spent nor this run's", s.path(consumedPK(id), countSK), old[attrN])
}

// runAttr is the attribute of the counter item that holds the slot run
// took.
func runAttr(run string) string { return "r" + run }

func num(n int) types.AttributeValue { return &types.AttributeValueMemberN{Value: strconv.Itoa(n)} }

// number reads a non-negative integer attribute.
func number(v types.AttributeValue) (int, bool) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n.Value)
	return i, err == nil && i >= 0
}

// Used implements [store.Store]: the counters of ids, read in one
// strongly consistent BatchGetItem per 100. Ids that are not record ids
// are skipped, as the embedded store skips them.
func (s *Store) Used(ids []string) (map[string]int, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	out := map[string]int{}
	var keys []map[string]types.AttributeValue
	seen := map[string]bool{}
	for _, id := range ids {
		if store.CheckID(id) != nil || seen[id] {
			continue
		}
		seen[id] = true
		keys = append(keys, key(consumedPK(id), countSK))
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 100)]
		keys = keys[len(batch):]
		for try := 0; len(batch) > 0; try++ {
			if try == maxUnprocessed {
				return nil, s.fail("BatchGetItem", fmt.Errorf("%d keys still unprocessed after %d requests", len(batch), try))
			}
			res, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
				RequestItems: map[string]types.KeysAndAttributes{s.table: {
					Keys:                     batch,
					ConsistentRead:           aws.Bool(true),
					ProjectionExpression:     aws.String("#pk, #n"),
					ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#n": attrN},
				}},
			})
			if err != nil {
				return nil, s.fail("BatchGetItem", err)
			}
			for _, item := range res.Responses[s.table] {
				pk, _ := item[attrPK].(*types.AttributeValueMemberS)
				n, ok := number(item[attrN])
				if pk == nil || !ok {
					continue
				}
				if id, _ := strings.CutPrefix(pk.Value, "consumed#"); n > 0 {
					out[id] = n
				}
			}
			batch = res.UnprocessedKeys[s.table].Keys
		}
	}
	return out, nil
}

// signCountPK is the partition key of a credential's sign-count item.
func signCountPK(cred string) string { return "signcount#" + store.CredKey(cred) }

// AdvanceSignCount implements [store.Store] with one conditional write
// of the credential's item signcount#KEY / count:
//
//	SET n = :c, r = :run
//	IF attribute_not_exists(n) OR n < :c OR (n = :c AND r = :run)
//
// DynamoDB serialises the writes, so of two runs racing on one credential
// the one whose count is not above the winner's fails the condition and is
// refused; the last clause makes a retried write of this run succeed.
func (s *Store) AdvanceSignCount(cred string, count uint32, run string) error {
	if err := store.CheckRunID(run); err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	k := key(signCountPK(cred), countSK)
	c := &types.AttributeValueMemberN{Value: strconv.FormatUint(uint64(count), 10)}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      k,
		UpdateExpression:         aws.String("SET #n = :c, #r = :run"),
		ConditionExpression:      aws.String("attribute_not_exists(#n) OR #n < :c OR (#n = :c AND #r = :run)"),
		ExpressionAttributeNames: map[string]string{"#n": attrN, "#r": "r"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":c": c, ":run": str(run),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return s.fail("UpdateItem", err)
	}
	old := ccf.Item
	if old == nil { // dynalite does not return the item: read it
		got, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.table), Key: k, ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return s.fail("GetItem", err)
		}
		old = got.Item
	}
	stored, ok := number(old[attrN])
	if !ok || stored < int(count) {
		return fmt.Errorf("%s: the conditional write failed but the stored count (%v) is below %d", s.path(signCountPK(cred), countSK), old[attrN], count)
	}
	return store.SignCountBack(cred, count, uint32(stored))
}

// SignCounts implements [store.Store] with a strongly consistent read of
// each credential's item.
func (s *Store) SignCounts(creds []string) (map[string]uint32, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	out := map[string]uint32{}
	for _, c := range creds {
		got, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(s.table), Key: key(signCountPK(c), countSK), ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return nil, s.fail("GetItem", err)
		}
		if n, ok := number(got.Item[attrN]); ok {
			out[c] = uint32(n)
		}
	}
	return out, nil
}
