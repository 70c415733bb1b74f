// Package testnet gives tests loopback addresses that stay theirs across a
// process restart.
//
// A port the kernel hands out for ":0" is in the ephemeral range: once the
// node that held it stops, another test's ":0" listener or outgoing
// connection may take it before the node restarts on it, and CI failed on
// "address already in use" that way. Addr picks instead a random address in
// 127.0.0.0/8 other than 127.0.0.1, where nothing else here listens or
// connects from, and a random port below the default ephemeral range
// (32768-60999), which only explicit binds use.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Addr returns a loopback host:port free for both TCP and UDP (gossip
// listens on both) at the time of the call.
func Addr(t testing.TB) string {
	t.Helper()
	for range 1000 {
		addr := fmt.Sprintf("127.%d.%d.%d:%d", rand.IntN(256), rand.IntN(256), 1+rand.IntN(254), 20000+rand.IntN(12000))
		if addr[:10] == "127.0.0.1:" {
			continue
		}
		if free(addr) {
			return addr
		}
	}
	t.Fatal("testnet: no free loopback address in 1000 tries")
	return ""
}

func free(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	p, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	p.Close()
	return true
}
