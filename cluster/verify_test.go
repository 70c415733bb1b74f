package cluster

import (
	"bytes"
	"testing"
)

// TestPeerProofBindsEveryField: the HMAC a node answers a peer challenge
// with changes with each field it covers, so an answer cannot be replayed
// for another challenge or relayed for another node or address, and the
// fields are length-prefixed, so that moving bytes from one field to the
// next changes it too.
func TestPeerProofBindsEveryField(t *testing.T) {
	tok := []byte("peer-token")
	c, nonce := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	base := peerProof(tok, c, nonce, "n2", "10.0.0.2:7379")
	for name, p := range map[string][]byte{
		"other token":     peerProof([]byte("peer-tokeN"), c, nonce, "n2", "10.0.0.2:7379"),
		"other challenge": peerProof(tok, bytes.Repeat([]byte{3}, 32), nonce, "n2", "10.0.0.2:7379"),
		"other nonce":     peerProof(tok, c, bytes.Repeat([]byte{3}, 32), "n2", "10.0.0.2:7379"),
		"other node":      peerProof(tok, c, nonce, "evil", "10.0.0.2:7379"),
		"other address":   peerProof(tok, c, nonce, "n2", "10.0.0.9:7379"),
		"bytes moved":     peerProof(tok, c, nonce, "n21", "0.0.0.2:7379"),
	} {
		if bytes.Equal(p, base) {
			t.Errorf("%s: same proof", name)
		}
	}
	if !bytes.Equal(base, peerProof(tok, c, nonce, "n2", "10.0.0.2:7379")) {
		t.Fatal("the proof is not deterministic")
	}
}
