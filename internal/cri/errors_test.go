package cri

import (
	"math"
	"testing"
	"time"
)

func TestSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want time.Duration
	}{
		{0, 0},
		{30, 30 * time.Second},
		{math.MaxInt64 / int64(time.Second), time.Duration(math.MaxInt64/int64(time.Second)) * time.Second},
		{10_000_000_000, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
	} {
		if got := seconds(tc.in); got != tc.want || got < 0 {
			t.Errorf("seconds(%d) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
