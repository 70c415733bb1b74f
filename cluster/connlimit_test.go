package cluster

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// acceptLoop accepts connections of l until it is closed, sending each
// on the returned channel; the test's cleanup closes l and waits for it.
func acceptLoop(t *testing.T, l net.Listener) <-chan net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for c := range ch {
			c.Close()
		}
	})
	return ch
}

// refusals records onRefuse's calls.
type refusals struct {
	mu  sync.Mutex
	ips []string
}

func (r *refusals) add(ip string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ips = append(r.ips, ip)
}

func (r *refusals) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ips)
}

// dial connects to addr; the test's cleanup closes the connection.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// accepted waits for the next accepted connection.
func accepted(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// notAccepted checks that no connection is accepted for a while.
func notAccepted(t *testing.T, ch <-chan net.Conn) {
	t.Helper()
	select {
	case c := <-ch:
		t.Fatalf("accepted a connection from %v over the cap", c.RemoteAddr())
	case <-time.After(100 * time.Millisecond):
	}
}

// closedByServer checks that the server closed c: a read ends without
// data.
func closedByServer(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	n, err := c.Read(b[:])
	var ne net.Error
	if n != 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("connection over the cap: read %d, %v; want it closed", n, err)
	}
}

// ips returns how many remote IPs have connections open.
func (l *connLimitListener) ips() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

// TestLimitListener: at most perIP connections per remote IP are open at
// once; one over the cap is closed at accept, reported, and Accept goes
// on; closing a connection (twice) frees one slot.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused refusals
	l := limitListener(raw, 2, refused.add)
	ll := l.(*connLimitListener)
	ch := acceptLoop(t, l)
	addr := raw.Addr().String()

	c1, c2 := dial(t, addr), dial(t, addr)
	s1, s2 := accepted(t, ch), accepted(t, ch)
	// The third (another port, the same IP) is closed at once.
	c3 := dial(t, addr)
	closedByServer(t, c3)
	notAccepted(t, ch)
	if got := refused.get(); !slices.Equal(got, []string{"127.0.0.1"}) {
		t.Fatalf("refusals %q, want one of 127.0.0.1", got)
	}
	if n := ll.openConns("127.0.0.1"); n != 2 {
		t.Fatalf("%d open, want 2", n)
	}
	// The accepted connections work.
	for _, p := range [][2]net.Conn{{c1, s1}, {c2, s2}} {
		if _, err := p[0].Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		p[1].SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := p[1].Read(b[:]); err != nil || b[0] != 'x' {
			t.Fatalf("accepted connection: %q, %v", b, err)
		}
	}
	// Closing one frees one slot, however often it is closed.
	s1.Close()
	s1.Close()
	if n := ll.openConns("127.0.0.1"); n != 1 {
		t.Fatalf("after closing one twice: %d open, want 1", n)
	}
	dial(t, addr)
	s4 := accepted(t, ch)
	c5 := dial(t, addr)
	closedByServer(t, c5)
	notAccepted(t, ch)
	// The client closing its end does not free the slot: the server's
	// Close does (gRPC closes a connection whose peer went away).
	c2.Close()
	c6 := dial(t, addr)
	closedByServer(t, c6)
	s2.Close()
	s4.Close()
	if n := ll.ips(); n != 0 {
		t.Fatalf("all closed: %d IPs with connections open", n)
	}
	dial(t, addr)
	dial(t, addr)
	accepted(t, ch).Close()
	accepted(t, ch).Close()
	if got := len(refused.get()); got != 3 {
		t.Fatalf("%d refusals, want 3", got)
	}
}

// TestLimitListenerIPv6: IPv6 addresses are counted apart from IPv4
// ones, by address.
func TestLimitListenerIPv6(t *testing.T) {
	raw, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Skipf("no IPv6 wildcard listener: %v", err)
	}
	port := raw.Addr().(*net.TCPAddr).Port
	l := limitListener(raw, 1, nil)
	ll := l.(*connLimitListener)
	ch := acceptLoop(t, l)
	c6, err := net.DialTimeout("tcp", net.JoinHostPort("::1", strconv.Itoa(port)), 10*time.Second)
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	t.Cleanup(func() { c6.Close() })
	accepted(t, ch)
	// IPv4 to a dual-stack listener arrives as ::ffff:127.0.0.1: counted
	// as 127.0.0.1, apart from ::1.
	dial(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	accepted(t, ch)
	if ll.openConns("::1") != 1 || ll.openConns("127.0.0.1") != 1 || ll.openConns("::ffff:127.0.0.1") != 1 {
		t.Fatalf("open: ::1 %d, 127.0.0.1 %d", ll.openConns("::1"), ll.openConns("127.0.0.1"))
	}
	closedByServer(t, dial(t, net.JoinHostPort("::1", strconv.Itoa(port))))
	closedByServer(t, dial(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))))
}

// TestLimitListenerNoCap: perIP <= 0 is no cap: the listener itself.
func TestLimitListenerNoCap(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, n := range []int{0, -1} {
		if l := limitListener(raw, n, nil); l != raw {
			t.Errorf("limitListener(l, %d) = %T, want l", n, l)
		}
	}
}

// TestLimitListenerConnTypes: an accepted TCP connection keeps its
// syscall.Conn (gRPC's channelz uses it).
func TestLimitListenerConnTypes(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := acceptLoop(t, limitListener(raw, 1, nil))
	dial(t, raw.Addr().String())
	c := accepted(t, ch)
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("%T is no syscall.Conn", c)
	}
	if _, err := sc.SyscallConn(); err != nil {
		t.Fatal(err)
	}
}

// TestConnLimitGRPC: a gRPC server on a limited listener keeps serving
// after refusing connections; a client over the cap fails, one under it
// works, and a slot freed by a client going away serves a new one.
func TestConnLimitGRPC(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused refusals
	l := limitListener(raw, 1, refused.add)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	check := func(cc *grpc.ClientConn, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	newClient := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(raw.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
				MinConnectTimeout: time.Second,
			}))
		if err != nil {
			t.Fatal(err)
		}
		return cc
	}
	first := newClient()
	if err := check(first, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	second := newClient()
	defer second.Close()
	if err := check(second, 300*time.Millisecond); err == nil {
		t.Fatal("a second connection from the same IP was served")
	}
	if len(refused.get()) == 0 {
		t.Fatal("no refusal reported")
	}
	if err := check(first, 10*time.Second); err != nil {
		t.Fatalf("the first client after the refusals: %v", err)
	}
	// The first client goes: the server closes its end, freeing the slot.
	first.Close()
	deadline := time.Now().Add(20 * time.Second)
	for check(second, time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the second client is never served after the first left")
		}
	}
}
