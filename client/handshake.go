package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// A TLS handshake that fails because a certificate does not verify (an
// unknown CA, a name the certificate does not hold, an expired
// certificate), because the node refused the client's certificate, or
// because the node does not speak TLS, fails the same way on every retry:
// the client reports it at once instead of retrying until the deadline.
//
// gRPC does not tell: a call on a connection whose handshake failed fails
// with Unavailable and the handshake error as text, exactly as one on a
// node that is down (grpc.WithReturnConnectionError and
// FailOnNonTempDialError only apply to the deprecated blocking grpc.Dial).
// So each connection's TLS credentials are wrapped (handshakeCreds) to keep
// the last handshake's failure, typed, while it is one of these; do ends a
// call's retries when an attempt failed with Unavailable whose message is
// that failure (see handshakeState.refusedBy).

// handshakeState is the outcome of the last TLS handshake of one node's
// connection.
type handshakeState struct {
	mu sync.Mutex
	// err is the last permanent handshake failure (see
	// permanentTLSError), nil if there was none. It is not cleared by a
	// later success or other failure: refusedBy only reports it for an
	// attempt whose error is this one.
	err error
}

func (h *handshakeState) set(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
}

// last returns the last permanent handshake failure, if any.
func (h *handshakeState) last() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// refusedBy returns the permanent handshake failure st (an attempt's
// status) reports, or nil: st is Unavailable and its message holds the
// text of the connection's last handshake failure, so the attempt failed
// because of that handshake, not of an older one followed by a node that
// went down since.
func (h *handshakeState) refusedBy(st *status.Status) error {
	if st.Code() != codes.Unavailable {
		return nil
	}
	err := h.last()
	if err == nil {
		return nil
	}
	// gRPC quotes the handshake's error in its message (desc = "..."),
	// escaping the quotes inside it.
	msg, quoted := err.Error(), strconv.Quote(err.Error())
	if !strings.Contains(st.Message(), msg) && !strings.Contains(st.Message(), quoted[1:len(quoted)-1]) {
		return nil
	}
	return err
}

// permanentTLSError reports whether err, from a TLS handshake or from
// reading a connection right after one, is a failure a retry would
// repeat:
//   - the node's certificate does not verify (tls.CertificateVerificationError
//     wrapping an x509 UnknownAuthorityError, HostnameError or
//     CertificateInvalidError);
//   - the node sent an alert refusing the handshake or the client's
//     certificate ("remote error: tls: certificate required", "bad
//     certificate", "unknown certificate authority", ...): with TLS 1.3 the
//     client's handshake completes before the node checks the client's
//     certificate, so its refusal arrives as the first read's error;
//   - the node does not speak TLS (tls.RecordHeaderError).
//
// A connection reset or closed during the handshake (a node restarting) or
// a timeout is not permanent.
func permanentTLSError(err error) bool {
	var (
		verr  *tls.CertificateVerificationError
		uaerr x509.UnknownAuthorityError
		herr  x509.HostnameError
		cierr x509.CertificateInvalidError
		rerr  tls.RecordHeaderError
		operr *net.OpError
	)
	switch {
	case errors.As(err, &verr), errors.As(err, &uaerr), errors.As(err, &herr), errors.As(err, &cierr):
		return true
	case errors.As(err, &rerr):
		return true
	case errors.As(err, &operr) && operr.Op == "remote error":
		// crypto/tls's alert type is unexported: its text tells.
		return refusingAlert(operr.Err.Error())
	}
	return false
}

// refusingAlert reports whether a TLS alert's text ("tls: bad certificate")
// is a node refusing the client or the handshake's parameters, which a
// retry would meet again (not "internal error", "user canceled", ...).
func refusingAlert(msg string) bool {
	msg = strings.TrimPrefix(msg, "tls: ")
	if strings.Contains(msg, "certificate") {
		return true // bad, unsupported, revoked, expired, unknown, required; unknown certificate authority
	}
	switch msg {
	case "access denied", "handshake failure", "protocol version not supported", "insufficient security level",
		"unrecognized name", "no application protocol":
		return true
	}
	return false
}

// handshakeCreds are TLS transport credentials that record each client
// handshake's permanent failure in state.
type handshakeCreds struct {
	credentials.TransportCredentials
	state *handshakeState
}

func (c handshakeCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		if permanentTLSError(err) {
			c.state.set(err)
		}
		return nil, nil, err
	}
	return &alertConn{Conn: conn, state: c.state, refused: make(chan struct{})}, info, nil
}

func (c handshakeCreds) Clone() credentials.TransportCredentials {
	return handshakeCreds{TransportCredentials: c.TransportCredentials.Clone(), state: c.state}
}

// alertConn is a TLS connection that records an alert refusing the client
// (its certificate, with TLS 1.3: see permanentTLSError) met by a read.
type alertConn struct {
	net.Conn
	state *handshakeState
	once  sync.Once
	// refused is closed once a read met a refusal, refusal.
	refused chan struct{}
	refusal error
}

// refusalWait bounds how long a failed write waits for the connection's
// reader to find the node's refusal that explains it.
const refusalWait = 100 * time.Millisecond

func (c *alertConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && permanentTLSError(err) {
		// Only the first failure: a refusal ends the connection.
		c.once.Do(func() {
			c.state.set(err)
			c.refusal = err
			close(c.refused)
		})
	}
	return n, err
}

// Write reports a write that failed because the node refused the client
// (after TLS 1.3's handshake the node closes the connection, and a call's
// first write may fail with "broken pipe" before its reader met the
// alert) as that refusal, so that the call's error names it.
func (c *alertConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		return n, nil
	}
	t := time.NewTimer(refusalWait)
	defer t.Stop()
	select {
	case <-c.refused:
		return n, &refusedWriteError{refusal: c.refusal, write: err}
	case <-t.C:
		return n, err
	}
}

// refusedWriteError is a write that failed because the node had refused
// the client.
type refusedWriteError struct {
	refusal, write error
}

func (e *refusedWriteError) Error() string { return e.refusal.Error() + " (" + e.write.Error() + ")" }
func (e *refusedWriteError) Unwrap() error { return e.write }
