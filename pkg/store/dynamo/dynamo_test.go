package dynamo_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/pkg/store/dynamo"
	"github.com/prod-write/prod-write/pkg/store/storetest"
	"github.com/prod-write/prod-write/pkg/testservers"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// The credentials tests sign with; dynalite accepts any. The secret is
// long and distinctive so a leak into an error would be found.
const (
	testAccess = "AKIDPRODWRITETEST"
	testSecret = "dynamo-Secret-Access-Key-Must-Never-Leak"
	testToken  = "dynamo-session-token-must-never-leak"
)

func creds() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(testAccess, testSecret, testToken)
}

// open returns a store on a new table of the shared dynalite, made by
// CreateTable as `store init` makes it.
func open(t *testing.T) *dynamo.Store {
	t.Helper()
	s := openTable(t, testservers.Name("pw"))
	if created, err := s.CreateTable(context.Background(), 30*time.Second); err != nil || !created {
		t.Fatalf("CreateTable = %v, %v", created, err)
	}
	return s
}

func openTable(t *testing.T, table string) *dynamo.Store {
	t.Helper()
	s, err := dynamo.Open(context.Background(), dynamo.Options{
		Table: table, Region: testservers.Region, Endpoint: testservers.Dynalite(t), Credentials: creds(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// client is a raw DynamoDB client on the shared dynalite, for writing what
// the store never would.
func client(t *testing.T) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region: testservers.Region, BaseEndpoint: aws.String(testservers.Dynalite(t)), Credentials: creds(),
	})
}

// TestDynamoConformance runs the backend-independent suite, the one the
// embedded store passes, on DynamoDB.
func TestDynamoConformance(t *testing.T) {
	storetest.RunConformance(t, func(t *testing.T) store.Store { return open(t) })
}

// Two stores with their own clients share one table, as two runner hosts
// do: of all their consumers of one single-use record exactly one wins,
// and each then sees the other's consumption.
func TestConsumeAcrossHosts(t *testing.T) {
	a := open(t)
	b := openTable(t, a.Table())
	id := storetest.ID("shared")
	type res struct {
		slot int
		err  error
	}
	results := make(chan res, 16)
	start := make(chan struct{})
	for i := range 16 {
		s := a
		if i%2 == 1 {
			s = b
		}
		go func() {
			<-start
			slot, err := s.Consume(id, 1, storetest.NewRun())
			results <- res{slot, err}
		}()
	}
	close(start)
	won := 0
	for range 16 {
		r := <-results
		switch {
		case r.err == nil:
			won++
		case !errors.Is(r.err, store.ErrConsumed):
			t.Fatalf("Consume: %v", r.err)
		}
	}
	if won != 1 {
		t.Fatalf("%d consumers won a single-use record, want 1", won)
	}
	for _, s := range []*dynamo.Store{a, b} {
		if used, err := s.Used([]string{id}); err != nil || used[id] != 1 {
			t.Fatalf("Used = %v, %v", used, err)
		}
	}
}

func TestCreateTableIsIdempotent(t *testing.T) {
	s := open(t)
	created, err := s.CreateTable(context.Background(), 30*time.Second)
	if err != nil || created {
		t.Fatalf("second CreateTable = %v, %v; want an existing table, no error", created, err)
	}
	// A table of that name keyed otherwise is not taken over.
	other := testservers.Name("other")
	_, err = client(t).CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            aws.String(other),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openTable(t, other).CreateTable(context.Background(), 30*time.Second); err == nil || !strings.Contains(err.Error(), "not a prod-write store") {
		t.Fatalf("CreateTable over another table: %v", err)
	}
}

// What under evidence#HEX is not a record the store wrote is reported with
// its dynamodb:// path and skipped, never returned.
func TestEvidenceProblems(t *testing.T) {
	s := open(t)
	fp := storetest.Fingerprint("p")
	good := storetest.Envelope(`{"good":true}`)
	if err := s.PutEvidence(fp, storetest.ID("good"), good); err != nil {
		t.Fatal(err)
	}
	pk := "evidence#" + strings.TrimPrefix(fp, "sha256:")
	c := client(t)
	put := func(sk string, env types.AttributeValue) {
		t.Helper()
		item := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}
		if env != nil {
			item["env"] = env
		}
		if _, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	envJSON := `{"payloadType":"t","payload":"e30=","signatures":[{"keyid":"k","sig":"c2ln"}]}`
	bad := map[string]types.AttributeValue{
		"not-an-id":                      &types.AttributeValueMemberS{Value: envJSON},
		storetest.ID("no-env"):           nil,
		storetest.ID("binary"):           &types.AttributeValueMemberB{Value: []byte(envJSON)},
		storetest.ID("not-json"):         &types.AttributeValueMemberS{Value: "{"},
		storetest.ID("unknown-field"):    &types.AttributeValueMemberS{Value: `{"payloadType":"t","payload":"e30=","signatures":[{"keyid":"k","sig":"c2ln"}],"x":1}`},
		storetest.ID("missing-payload"):  &types.AttributeValueMemberS{Value: `{"payloadType":"t","signatures":[{"keyid":"k","sig":"c2ln"}]}`},
		storetest.ID("empty-signatures"): &types.AttributeValueMemberS{Value: `{"payloadType":"t","payload":"e30=","signatures":[]}`},
	}
	var wantPaths []string
	for sk, env := range bad {
		put(sk, env)
		wantPaths = append(wantPaths, "dynamodb://"+s.Table()+"/"+pk+"/"+sk)
	}
	recs, problems, err := s.Evidence(fp)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Payload != good.Payload {
		t.Fatalf("Evidence returned %d records, want only the good one", len(recs))
	}
	var paths []string
	for _, p := range problems {
		paths = append(paths, p.Path)
		if p.Err == "" {
			t.Errorf("problem %s says nothing", p.Path)
		}
	}
	slices.Sort(paths)
	slices.Sort(wantPaths)
	if !slices.Equal(paths, wantPaths) {
		t.Fatalf("problems at\n%s\nwant\n%s", strings.Join(paths, "\n"), strings.Join(wantPaths, "\n"))
	}
}

// A stored plan item that is not an envelope is an error, never a plan.
func TestCorruptPlan(t *testing.T) {
	s := open(t)
	fp := storetest.Fingerprint("corrupt")
	_, err := client(t).PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: map[string]types.AttributeValue{
		"pk":  &types.AttributeValueMemberS{Value: "plan#" + strings.TrimPrefix(fp, "sha256:")},
		"sk":  &types.AttributeValueMemberS{Value: "plan"},
		"env": &types.AttributeValueMemberS{Value: "not json"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if env, err := s.GetPlan(fp); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetPlan of a corrupt item = %v, %v; want an error", env, err)
	}
	if err := s.PutPlan(fp, storetest.Envelope(`{}`)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("PutPlan over a corrupt item: %v, want ErrExists", err)
	}
	// An item without env at all: the same.
	fp2 := storetest.Fingerprint("no-env")
	_, err = client(t).PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "plan#" + strings.TrimPrefix(fp2, "sha256:")},
		"sk": &types.AttributeValueMemberS{Value: "plan"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPlan(fp2); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetPlan of an item without env: %v; want an error", err)
	}
	if err := s.PutPlan(fp2, storetest.Envelope(`{}`)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("PutPlan over an item without env: %v, want ErrExists", err)
	}
}

// Content is read only whole and exactly as kept: a part missing, a part
// beyond the count, or no count at all is an error or not found, never
// fewer or more bytes.
func TestContentPartsWhole(t *testing.T) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("INSERT INTO t VALUES (1);\n"), 30000) // 3 parts
	for i, tamper := range []struct {
		name   string
		item   func(pk string) map[string]types.AttributeValue
		delete bool
		absent bool
	}{
		{name: "a part missing", delete: true, item: func(pk string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: "part#1"}}
		}},
		{name: "a part beyond the count", item: func(pk string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: "part#3"}, "b": &types.AttributeValueMemberB{Value: []byte("DROP TABLE t;\n")}}
		}},
		{name: "no count", delete: true, absent: true, item: func(pk string) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: "content"}}
		}},
	} {
		s := open(t)
		content := append(data, byte(i))
		sum := store.SumOf(content)
		if err := s.PutContent(sum, content); err != nil {
			t.Fatal(err)
		}
		pk := "content#" + strings.TrimPrefix(sum, "sha256:")
		var err error
		if item := tamper.item(pk); tamper.delete {
			_, err = client(t).DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table()), Key: item})
		} else {
			_, err = client(t).PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table()), Item: item})
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Content(sum)
		switch {
		case tamper.absent && !errors.Is(err, store.ErrNotFound):
			t.Errorf("%s: %d bytes, %v; want not found", tamper.name, len(got), err)
		case !tamper.absent && (err == nil || errors.Is(err, store.ErrNotFound)):
			t.Errorf("%s: %d bytes, %v; want an error", tamper.name, len(got), err)
		}
	}
}

// failsClosed checks that every Store method fails with a *dynamo.Error,
// never an answer, within budget, and that no credential is in the
// message.
func failsClosed(t *testing.T, s *dynamo.Store, budget time.Duration) []error {
	t.Helper()
	fp, id := storetest.Fingerprint("x"), storetest.ID("x")
	var errs []error
	start := time.Now()
	_, err := s.GetPlan(fp)
	errs = append(errs, err)
	errs = append(errs, s.PutPlan(fp, storetest.Envelope(`{}`)))
	errs = append(errs, s.PutEvidence(fp, id, storetest.Envelope(`{}`)))
	_, _, err = s.Evidence(fp)
	errs = append(errs, err)
	_, err = s.Consume(id, 1, storetest.NewRun())
	errs = append(errs, err)
	_, err = s.Consume(id, 3, storetest.NewRun())
	errs = append(errs, err)
	_, err = s.Used([]string{id})
	errs = append(errs, err)
	took := time.Since(start)
	for i, err := range errs {
		var de *dynamo.Error
		if !errors.As(err, &de) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConsumed) {
			t.Errorf("call %d: %v, want a *dynamo.Error", i, err)
			continue
		}
		for _, secret := range []string{testSecret, testToken} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("call %d: the error carries a credential: %v", i, err)
			}
		}
	}
	if took > budget {
		t.Errorf("7 calls took %s to fail, want under %s", took, budget)
	}
	return errs
}

// With DynamoDB unreachable every call fails, fast, and none answers.
func TestUnreachableFailsClosed(t *testing.T) {
	s, err := dynamo.Open(context.Background(), dynamo.Options{
		Table: "table", Region: testservers.Region, Endpoint: "http://127.0.0.1:1", Credentials: creds(),
	})
	if err != nil {
		t.Fatal(err)
	}
	errs := failsClosed(t, s, 15*time.Second)
	if !strings.Contains(errs[0].Error(), "cannot reach") {
		t.Errorf("error does not say the service cannot be reached: %v", errs[0])
	}
}

// A server that accepts connections and never answers fails within the
// call budget, not the SDK's default minutes.
func TestSilentServerTimesOut(t *testing.T) {
	s, err := dynamo.Open(context.Background(), dynamo.Options{
		Table: "table", Region: testservers.Region, Endpoint: silentServer(t), Credentials: creds(), Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = s.GetPlan(storetest.Fingerprint("x"))
	var de *dynamo.Error
	if !errors.As(err, &de) {
		t.Fatalf("GetPlan from a silent server: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("GetPlan took %s", took)
	}
}

// Without the table, calls fail closed and say how to make it.
func TestMissingTable(t *testing.T) {
	s := openTable(t, testservers.Name("absent"))
	errs := failsClosed(t, s, 15*time.Second)
	var de *dynamo.Error
	if !errors.As(errs[0], &de) || !de.TableMissing() || !strings.Contains(errs[0].Error(), "prod-write store init") {
		t.Fatalf("GetPlan without a table: %v", errs[0])
	}
}

func TestOpenChecksOptions(t *testing.T) {
	for _, o := range []dynamo.Options{
		{Region: "us-east-1"},
		{Table: "t", Region: "us-east-1"},
		{Table: "table", Region: "us-east-1", Endpoint: "localhost:8000"},
		{Table: "table", Region: "us-east-1", Endpoint: "ftp://localhost"},
		{Table: "table/x", Region: "us-east-1"},
	} {
		if _, err := dynamo.Open(context.Background(), o); err == nil {
			t.Errorf("Open(%+v) accepts it", o)
		}
	}
}

// silentServer accepts connections and never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String()
}
