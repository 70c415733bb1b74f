package sst

import "github.com/cairnkv/cairn/lsm/internal/base"

// separatorTrailer is the trailer given to a shortened index key: the
// largest trailer, so that the separator sorts before every real entry of
// its user key.
var separatorTrailer = base.MakeTrailer(base.SeqNumMax, base.KindMax)

// appendSeparator appends to dst an internal key s with a <= s < b, as short
// as it can cheaply find: the index key between two data blocks whose last
// and first keys are a and b. REQUIRES: a < b (base.InternalCompare).
//
// When the user keys differ, a shorter user key u with ua < u < ub is sought
// (LevelDB's FindShortestSeparator, extended as Pebble does to look past the
// first differing byte); s is then u with the largest trailer, which sorts
// after a (its user key is larger) and before b (its user key is smaller).
// Otherwise s is a itself.
func appendSeparator(dst, a, b []byte) []byte {
	ua, ub := base.UserKey(a), base.UserKey(b)
	n := min(len(ua), len(ub))
	i := 0
	for i < n && ua[i] == ub[i] {
		i++
	}
	if i < n && ua[i] < ub[i] {
		// ua[:i] is common and ua[i] < ub[i].
		if ua[i]+1 < ub[i] {
			if i+1 < len(ua) {
				return appendShortened(dst, ua[:i+1])
			}
		} else {
			// ua[i]+1 == ub[i]: keep ua[i] and bump the first later
			// byte of ua that can be bumped.
			for j := i + 1; j < len(ua)-1; j++ {
				if ua[j] < 0xff {
					return appendShortened(dst, ua[:j+1])
				}
			}
		}
	}
	return append(dst, a...)
}

// appendSuccessor appends to dst an internal key s >= a, short if it can: the
// index key of the last data block, whose last key is a.
func appendSuccessor(dst, a []byte) []byte {
	ua := base.UserKey(a)
	for j := 0; j < len(ua)-1; j++ {
		if ua[j] < 0xff {
			return appendShortened(dst, ua[:j+1])
		}
	}
	return append(dst, a...)
}

// appendShortened appends prefix with its last byte incremented and the
// separator trailer. REQUIRES: prefix's last byte < 0xff.
func appendShortened(dst, prefix []byte) []byte {
	dst = append(dst, prefix...)
	dst[len(dst)-1]++
	return base.MakeInternalKey(dst, nil, separatorTrailer.SeqNum(), separatorTrailer.Kind())
}
