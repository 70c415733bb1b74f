package membership

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"
)

// Gossip key rotation, as `consul keyring` does it: memberlist decrypts a
// packet with each key of its keyring in turn and encrypts with the primary
// one, so a cluster changes keys without a restart in three steps, each
// done on every member before the next begins:
//
//  1. InstallKey(new): every member accepts the new key (and still sends
//     with the old one);
//  2. UseKey(new): every member sends with the new key (members that have
//     not switched yet still read it, having installed it);
//  3. RemoveKey(old): nobody sends with it any more.
//
// A keyring exists only if the node started with a key (Config.SecretKey):
// memberlist decides at start whether gossip is encrypted.

// ErrNoKeyring is returned by the keyring methods of a Discovery whose
// gossip is not encrypted.
var ErrNoKeyring = errors.New("membership: gossip is not encrypted (start the node with a gossip key to have a keyring)")

// ErrKeyNotInstalled is returned by UseKey and RemoveKey for a key the
// keyring does not hold.
var ErrKeyNotInstalled = errors.New("membership: key not in the gossip keyring")

// KeyFingerprint identifies a key without revealing it: the first 8 bytes
// of its SHA-256, in hex. Logs and the admin API show keys only this way.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// ValidateKey reports whether key can be a gossip key (16, 24 or 32 bytes:
// AES-128, -192 or -256).
func ValidateKey(key []byte) error {
	if err := memberlist.ValidateKey(key); err != nil {
		return fmt.Errorf("membership: gossip key of %d bytes: must be 16, 24 or 32", len(key))
	}
	return nil
}

// Keys returns the primary key and every key of the keyring (the primary
// one included), in the keyring's order.
func (d *Discovery) Keys() (primary []byte, keys [][]byte, err error) {
	if d.keyring == nil {
		return nil, nil, ErrNoKeyring
	}
	return d.keyring.GetPrimaryKey(), d.keyring.GetKeys(), nil
}

// InstallKey adds key to the keyring; installing a key already there does
// nothing.
func (d *Discovery) InstallKey(key []byte) error {
	if d.keyring == nil {
		return ErrNoKeyring
	}
	if err := ValidateKey(key); err != nil {
		return err
	}
	return d.keyring.AddKey(key)
}

// UseKey makes key, which must be installed, the primary key.
func (d *Discovery) UseKey(key []byte) error {
	if err := d.hasKey(key); err != nil {
		return err
	}
	return d.keyring.UseKey(key)
}

// RemoveKey drops key, which must be installed and not the primary key.
func (d *Discovery) RemoveKey(key []byte) error {
	if err := d.hasKey(key); err != nil {
		return err
	}
	if bytes.Equal(key, d.keyring.GetPrimaryKey()) {
		return fmt.Errorf("membership: key %s is the primary gossip key: use another key first", KeyFingerprint(key))
	}
	return d.keyring.RemoveKey(key)
}

func (d *Discovery) hasKey(key []byte) error {
	if d.keyring == nil {
		return ErrNoKeyring
	}
	if !slices.ContainsFunc(d.keyring.GetKeys(), func(k []byte) bool { return bytes.Equal(k, key) }) {
		return fmt.Errorf("%w: %s", ErrKeyNotInstalled, KeyFingerprint(key))
	}
	return nil
}
