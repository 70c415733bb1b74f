package client

import (
	"context"
	"errors"
)

// bearerToken sends Config.Token with every call, as the metadata
// "authorization: Bearer <token>" that a node with an authorization
// policy (cluster/auth) reads.
//
// It does not require transport security: a token over plaintext is
// readable by anyone who can see the traffic, so use it without TLS only
// on loopback or in tests. A node refuses a call without a valid token
// with codes.Unauthenticated, and a token whose role is too low with
// codes.PermissionDenied (the message names the role the call needs);
// the client does not retry either.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }

// String keeps the token out of logs and %v.
func (bearerToken) String() string { return "bearerToken(redacted)" }

// checkToken reports a token that cannot travel in a gRPC header (nor be
// typed): only printable ASCII without spaces.
func checkToken(t string) error {
	for i := 0; i < len(t); i++ {
		if t[i] < 0x21 || t[i] > 0x7e {
			return errors.New("cairn: token with a byte that is not printable ASCII")
		}
	}
	return nil
}
