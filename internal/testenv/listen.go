package testenv

import (
	"crypto/rand"
	"fmt"
	"net"
	"testing"
)

// ListenDNS opens a UDP socket and a TCP listener on the same port of host
// (an IP literal), as a DNS server needs (RFC 1035 section 4.2; RFC 7766
// section 5: TCP on the UDP port). port "0" takes a free port: the kernel
// picks the UDP port, and the same TCP port may be held at that moment by
// another socket (an outgoing connection's local port, another test
// process's listener), so a taken TCP port is retried with a new UDP port,
// up to 50 times. A fixed port is tried once. The error names the network
// and address that could not be opened.
func ListenDNS(host, port string) (net.PacketConn, net.Listener, error) {
	tries := 1
	if port == "0" {
		tries = 50
	}
	var err error
	for range tries {
		var pc net.PacketConn
		if pc, err = net.ListenPacket("udp", net.JoinHostPort(host, port)); err != nil {
			return nil, nil, err
		}
		_, p, _ := net.SplitHostPort(pc.LocalAddr().String())
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort(host, p)); err == nil {
			return pc, ln, nil
		}
		pc.Close()
	}
	return nil, nil, fmt.Errorf("testenv: no port free for both UDP and TCP on %s after %d tries: %w", host, tries, err)
}

// FreeAddr returns "127.A.B.C:port" free for both TCP and UDP, for a
// server the test starts in another process (which must bind it itself).
// The address is a random one of 127.200.0.0/13, not 127.0.0.1: between
// this check and that process's bind, another socket could take a port of
// 127.0.0.1 (every loopback connection's local port is one), but nothing
// else binds these addresses. 127.0.0.0/8 is all loopback on Linux
// (RFC 1122 section 3.2.1.3); no privilege is needed below port 1024's.
func FreeAddr(t testing.TB) string {
	t.Helper()
	var b [3]byte
	for range 50 {
		rand.Read(b[:])
		host := fmt.Sprintf("127.%d.%d.%d", 200+b[0]%8, b[1], 1+b[2]%254)
		pc, ln, err := ListenDNS(host, "0")
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		pc.Close()
		ln.Close()
		return addr
	}
	t.Fatal("testenv: no free address of 127.200.0.0/13")
	return ""
}
