package main

import (
	"testing"
	"time"
)

func TestPairedDifference(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x*float64(time.Millisecond)))
		}
		return d
	}
	for _, c := range []struct {
		name         string
		a, b         []time.Duration
		mid, lo, hi  time.Duration
		containsOnly bool // lo ≤ mid ≤ hi is all that is asked
	}{
		{name: "the same", a: ms(17, 18, 16, 20), b: ms(17, 18, 16, 20)},
		{name: "a constant slower", a: ms(18, 19, 17, 21), b: ms(17, 18, 16, 20), mid: time.Millisecond, lo: time.Millisecond, hi: time.Millisecond},
		{name: "the rounds' drift cancels", a: ms(10, 30, 20, 40, 15), b: ms(11, 31, 21, 41, 16), mid: -time.Millisecond, lo: -time.Millisecond, hi: -time.Millisecond},
		{name: "spread", a: ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), b: ms(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), mid: 6 * time.Millisecond, containsOnly: true},
	} {
		mid, lo, hi := pairedDifference(c.a, c.b)
		if mid != c.mid || lo > mid || hi < mid || !c.containsOnly && (lo != c.lo || hi != c.hi) {
			t.Errorf("%s: %v [%v, %v], want %v [%v, %v]", c.name, mid, lo, hi, c.mid, c.lo, c.hi)
		}
		if c.containsOnly && (lo == hi || lo < time.Millisecond || hi > 11*time.Millisecond) {
			t.Errorf("%s: the interval [%v, %v] should be wide, inside the data", c.name, lo, hi)
		}
	}
}
