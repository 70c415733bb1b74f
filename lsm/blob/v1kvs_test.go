package blob

import (
	"bytes"
	"math/rand/v2"
)

// v1KVs are the records of testdata/v1-*.blob, files written by the
// format's first writer (before records of a compressed file could be
// stored raw): a value that compresses, random ones that do not (of
// several sizes), and an empty one.
func v1KVs() [][2][]byte {
	rng := rand.New(rand.NewPCG(15, 1))
	random := func(n int) []byte {
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		return v
	}
	return [][2][]byte{
		{[]byte("key-text"), bytes.Repeat([]byte("the blob of text "), 100)},
		{[]byte("key-random-300"), random(300)},
		{[]byte("key-empty"), nil},
		{[]byte("key-random-4096"), random(4096)},
		{[]byte("key-short"), []byte("x")},
	}
}
