package cri

import (
	"math"
	"time"
)

func nowNano() int64 { return time.Now().UnixNano() }

// seconds converts a CRI timeout in seconds to a Duration, saturating
// instead of overflowing: a grace period of 10^10 s means "very long", not
// the negative Duration the plain product wraps to (which would kill at
// once).
func seconds(n int64) time.Duration {
	if n > math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Second
}
