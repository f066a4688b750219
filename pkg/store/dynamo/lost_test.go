package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/pkg/store/dynamo"
	"github.com/prod-write/prod-write/pkg/store/storetest"
	"github.com/prod-write/prod-write/pkg/testservers"
)

// behind returns a store on a's table whose requests pass through a new
// proxy in front of dynalite.
func behind(t *testing.T, a *dynamo.Store) (*dynamo.Store, *testservers.DynamoProxy) {
	t.Helper()
	p := testservers.NewDynamoProxy(testservers.Dynalite(t))
	t.Cleanup(p.Close)
	s, err := dynamo.Open(context.Background(), dynamo.Options{
		Table: a.Table(), Region: testservers.Region, Endpoint: p.URL, Credentials: creds(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// A consuming write whose reply is lost (the write was carried out; the
// SDK retries the same bytes) neither spends a second use nor is refused
// as consumed by another run: for a single-use approval and for every use
// of a 5-use one, each run gets exactly one slot. Both ways the service
// may say why the retry's condition failed are covered: with the item as
// it was in the error (ReturnValuesOnConditionCheckFailure, DynamoDB) and
// without it (dynalite), when the store reads it.
func TestConsumeLostReply(t *testing.T) {
	for _, returnOld := range []bool{false, true} {
		for _, uses := range []int{1, 5} {
			t.Run(fmt.Sprintf("uses=%d,returnOld=%v", uses, returnOld), func(t *testing.T) {
				s, p := behind(t, open(t))
				p.ReturnOld(returnOld)
				p.Drop(testservers.DropFirst("UpdateItem"))
				id := storetest.ID("lost")
				for i := range uses {
					slot, err := s.Consume(id, uses, storetest.NewRun())
					if err != nil || slot != i {
						t.Fatalf("run %d of %d, its reply lost once: Consume = %d, %v; want slot %d", i+1, uses, slot, err, i)
					}
				}
				c := p.Counts()
				if c.Dropped != uses || c.Requests["UpdateItem"] != 2*uses {
					t.Fatalf("%d replies lost and %d UpdateItems; want each of the %d consumptions lost once and retried once", c.Dropped, c.Requests["UpdateItem"], uses)
				}
				// The ALL_OLD answer is used when the service gives it:
				// nothing is read back then.
				if gets := c.Requests["GetItem"]; returnOld && gets != 0 || !returnOld && gets != uses {
					t.Fatalf("%d GetItems after %d failed retries (returnOld %v)", gets, uses, returnOld)
				}
				if used, err := s.Used([]string{id}); err != nil || used[id] != uses {
					t.Fatalf("Used = %v, %v; want %d: no use lost, none spent twice", used, err, uses)
				}
				_, err := s.Consume(id, uses, storetest.NewRun())
				if !errors.Is(err, store.ErrConsumed) {
					t.Fatalf("another run once all are spent: %v, want ErrConsumed", err)
				}
			})
		}
	}
}

// Racing runs whose every consuming reply is lost once still spend each
// use of a 5-use record exactly once, and no run is refused while a use is
// left.
func TestConsumeLostReplyRace(t *testing.T) {
	s, p := behind(t, open(t))
	p.Drop(testservers.DropFirst("UpdateItem"))
	id := storetest.ID("lost-race")
	const uses, runs = 5, 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		slots    []int
		refused  int
		failures []error
	)
	start := make(chan struct{})
	for range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := storetest.NewRun()
			<-start
			slot, err := s.Consume(id, uses, run)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				slots = append(slots, slot)
			case errors.Is(err, store.ErrConsumed):
				refused++
			default:
				failures = append(failures, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(failures...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(slots)
	if !slices.Equal(slots, []int{0, 1, 2, 3, 4}) || refused != runs-uses {
		t.Fatalf("%d racers, every reply lost once: slots %v, %d refused; want 0 to 4 once each and %d refused", runs, slots, refused, runs-uses)
	}
	if used, err := s.Used([]string{id}); err != nil || used[id] != uses {
		t.Fatalf("Used = %v, %v; want %d", used, err, uses)
	}
}

// Under 64 racers on one many-use record no use is lost to contention:
// the consuming writes that fail are only those of runs refused because
// every use is spent, one each, and a run makes one request (two when
// refused by a service that does not return the old item).
func TestConsumeContention(t *testing.T) {
	for _, uses := range []int{5, 64} {
		t.Run(fmt.Sprint("uses=", uses), func(t *testing.T) {
			s, p := behind(t, open(t))
			const runs = 64
			slots, refused := storetest.Race(t, s, storetest.ID("contention"), uses, runs)
			if len(slots) != uses || refused != runs-uses {
				t.Fatalf("%d racers on %d uses: %d slots, %d refused", runs, uses, len(slots), refused)
			}
			c := p.Counts()
			if c.Requests["UpdateItem"] != runs || c.FailedTotal() != refused {
				t.Fatalf("%d racers on %d uses: %d UpdateItems and %d failed conditional writes (%v); want one write per run, failing only for the %d refused", runs, uses, c.Requests["UpdateItem"], c.FailedTotal(), c.Requests, refused)
			}
			if c.Total() != runs+refused {
				t.Fatalf("%d requests for %d runs (%v)", c.Total(), runs, c.Requests)
			}
		})
	}
}
