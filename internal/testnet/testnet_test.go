package testnet

import (
	"net"
	"strings"
	"testing"
)

func TestAddrIsFreeOffDefaultLoopback(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		a := Addr(t)
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		if host == "127.0.0.1" || !strings.HasPrefix(host, "127.") || port < "20000" || port >= "32000" || len(port) != 5 {
			t.Fatalf("Addr() = %s: want 127/8 but not 127.0.0.1, port in [20000, 32000)", a)
		}
		if seen[a] {
			t.Fatalf("Addr() returned %s twice", a)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("Addr() = %s, not free for TCP: %v", a, err)
		}
		p, err := net.ListenPacket("udp", a)
		if err != nil {
			t.Fatalf("Addr() = %s, not free for UDP: %v", a, err)
		}
		l.Close()
		p.Close()
	}
}

func TestAddrSkipsTakenAddress(t *testing.T) {
	// Free reports a taken address as such.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free(l.Addr().String()) {
		t.Fatalf("free(%s) = true while it is listened on", l.Addr())
	}
}
