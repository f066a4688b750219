package receipts

import "testing"

// TestCheckBreakGlassUnreadRecord: a break-glass run whose record did not
// decode (which the gate's acceptance rules out today) fails with a
// problem instead of crashing replay, and is no breaker's run.
func TestCheckBreakGlassUnreadRecord(t *testing.T) {
	st := &state{bgRuns: map[string][]*bgEntry{}, bgByRecord: map[string][]*bgEntry{}}
	e := &entry{res: Result{Problems: []Problem{}}, bg: &bgEntry{id: "0123456789abcdef", seen: map[string]bool{}}}
	st.checkBreakGlass(e)
	if len(e.res.Problems) != 1 || e.res.Problems[0].Code != GateNotSatisfied {
		t.Fatalf("problems %+v, want one %s", e.res.Problems, GateNotSatisfied)
	}
	if len(st.bgOrder) != 0 || len(st.bgByRecord) != 0 || len(st.bgRuns) != 0 {
		t.Fatalf("the run was counted as a break-glass run: %d runs", len(st.bgOrder))
	}
}
