// Package dynamo is the DynamoDB backend of [store.Store] (SPEC §10): plans,
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
//	consumed#ID           0000000000…   at: when the use was spent
//
// # Guarantees
//
// Every write is a PutItem conditioned on attribute_not_exists(pk): nothing
// is ever overwritten, and of any number of concurrent consumers of one
// consumption slot exactly one succeeds. Every read is strongly consistent
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
	attrAt  = "at"
)

// The retry and timeout budget. The gate sits in front of a production
// write: with DynamoDB unreachable, run must refuse within seconds, not
// wait out the SDK's default retries (docs/DISTRIBUTED.md, "Failing
// closed").
const (
	// DefaultTimeout bounds one Store call, retries included.
	DefaultTimeout = 10 * time.Second
	requestTimeout = 5 * time.Second
)

// slotWidth is the zero padding of consumption slots, so that they sort
// in order.
const slotWidth = 10

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
func slotSK(slot int) string      { return fmt.Sprintf("%0*d", slotWidth, slot) }
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
// item with the same bytes is success, with other bytes store.ErrExists.
func (s *Store) putOnce(pk, sk, env string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	item := key(pk, sk)
	item[attrEnv] = str(env)
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
	old, found, err := s.getEnv(ctx, pk, sk)
	var failed *Error
	switch {
	case errors.As(err, &failed):
		return err
	case err == nil && found && old == env:
		return nil
	}
	// Other bytes, or an item that is not the store's: as the embedded
	// store treats a file it cannot read back.
	return fmt.Errorf("%s: %w", s.path(pk, sk), store.ErrExists)
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
func (s *Store) query(ctx context.Context, pk string, count bool, fn func(*dynamodb.QueryOutput)) error {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk)},
		ConsistentRead:            aws.Bool(true),
	}
	if count {
		in.Select = types.SelectCount
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
	err := s.query(ctx, pk, false, func(page *dynamodb.QueryOutput) {
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

// Consume implements [store.Store]: a use is spent by a conditional put of
// consumed#ID / SLOT, which exactly one of any number of concurrent
// writers wins. For a record of one use that is a single write; for more,
// the count of spent slots is read first and the next slots are tried in
// order, as the embedded store does (docs/adr/0006-consumption.md).
func (s *Store) Consume(id string, uses int) (int, error) {
	if err := store.CheckID(id); err != nil {
		return 0, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	pk := consumedPK(id)
	start := 0
	if uses > 1 {
		n, err := s.count(ctx, pk)
		if err != nil {
			return 0, err
		}
		start = n
	}
	at := time.Now().UTC().Format(time.RFC3339Nano)
	for slot := start; slot < uses; slot++ {
		item := key(pk, slotSK(slot))
		item[attrAt] = str(at)
		_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:           aws.String(s.table),
			Item:                item,
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		})
		if conditionFailed(err) {
			continue
		}
		if err != nil {
			return 0, s.fail("PutItem", err)
		}
		return slot, nil
	}
	return 0, fmt.Errorf("record %.12s…: %w", id, store.ErrConsumed)
}

func (s *Store) count(ctx context.Context, pk string) (int, error) {
	n := 0
	err := s.query(ctx, pk, true, func(page *dynamodb.QueryOutput) { n += int(page.Count) })
	return n, err
}

// Used implements [store.Store]. Ids that are not record ids are skipped,
// as the embedded store skips them.
func (s *Store) Used(ids []string) (map[string]int, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	out := map[string]int{}
	for _, id := range ids {
		if store.CheckID(id) != nil {
			continue
		}
		n, err := s.count(ctx, consumedPK(id))
		if err != nil {
			return nil, err
		}
		if n > 0 {
			out[id] = n
		}
	}
	return out, nil
}
