package cluster

import (
	"net"
	"net/netip"
	"sync"
	"syscall"
)

// limitListener returns a listener that lets at most perIP connections
// from one remote IP address be open at once (Config.MaxConnsPerIP): a
// connection over the cap is closed as soon as it is accepted, onRefuse
// (if not nil) is called with its address, and Accept goes on to the next
// one. Accept never returns an error for a refused connection (gRPC's
// Serve would stop on it). Closing an accepted connection frees its slot,
// once however often it is closed.
//
// Addresses are compared by IP, not port: an IPv4 address and its
// IPv4-mapped IPv6 form are the same address. A connection whose remote
// address is not an IP address (a Unix socket, an in-memory pipe) is not
// counted. perIP <= 0 means no cap: l itself is returned.
//
// onRefuse runs on the accepting goroutine, once per refused connection:
// it must be quick, and should not log every call (a client that keeps
// dialing would flood the log).
func limitListener(l net.Listener, perIP int, onRefuse func(ip string)) net.Listener {
	if perIP <= 0 {
		return l
	}
	return &connLimitListener{Listener: l, perIP: perIP, onRefuse: onRefuse, open: map[netip.Addr]int{}}
}

type connLimitListener struct {
	net.Listener
	perIP    int
	onRefuse func(ip string)

	mu   sync.Mutex
	open map[netip.Addr]int // connections open by remote IP; no zero entries
}

func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip, ok := remoteIP(c)
		if !ok {
			return c, nil
		}
		l.mu.Lock()
		if l.open[ip] >= l.perIP {
			l.mu.Unlock()
			c.Close()
			if l.onRefuse != nil {
				l.onRefuse(ip.String())
			}
			continue
		}
		l.open[ip]++
		l.mu.Unlock()
		lc := &limitedConn{Conn: c, release: func() { l.release(ip) }}
		if _, ok := c.(syscall.Conn); ok {
			// Keep the raw connection reachable (gRPC's channelz reads
			// socket options through it).
			return &limitedSyscallConn{lc}, nil
		}
		return lc, nil
	}
}

func (l *connLimitListener) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

// openConns returns how many connections from ip are open (for tests).
func (l *connLimitListener) openConns(ip string) int {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[a.Unmap()]
}

// remoteIP returns the IP address of c's remote end (an IPv4-mapped IPv6
// address as IPv4), and false if it has none.
func remoteIP(c net.Conn) (netip.Addr, bool) {
	addr := c.RemoteAddr()
	if addr == nil {
		return netip.Addr{}, false
	}
	if a, ok := addr.(*net.TCPAddr); ok {
		ap := a.AddrPort()
		return ap.Addr().Unmap(), ap.Addr().IsValid()
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// limitedConn is an accepted connection holding a slot of its remote IP
// until it is first closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// limitedSyscallConn is a limitedConn whose connection is a syscall.Conn.
type limitedSyscallConn struct{ *limitedConn }

func (c *limitedSyscallConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}
