package browser

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Socket is one socket Chromium's net log shows it connecting: a TCP
// connect attempt (a SYN went out) or a connected UDP socket, with whether
// any bytes were sent on it. Chromium connects a UDP socket without
// sending to learn a route (its IPv6 reachability probe connects one to
// [2001:4860:4860::8888]:443, RFC 6724 address selection): such a socket
// has Sent false and put no packet on the wire.
type Socket struct {
	Proto string         // "tcp" or "udp"
	Addr  netip.AddrPort // the destination
	Sent  bool           // bytes were sent on it (TCP: always, the SYN)
}

// NetLogSockets reads a net log Chromium wrote (Options.NetLog; the
// format of Chromium's FileNetLogObserver: the constants on the first
// line, then one event per line) and returns the sockets it connected,
// in the order of their first connect, one entry per distinct (protocol,
// destination, sent). A log cut short (a browser killed before Close) is
// read up to its last whole event. Errors: the file cannot be read, or its
// first line holds no event type table.
func NetLogSockets(path string) ([]Socket, error) {
	conns, err := NetLogConns(path)
	if err != nil {
		return nil, err
	}
	out := make([]Socket, 0, len(conns))
	for _, c := range conns {
		if !slices.Contains(out, c.Socket) {
			out = append(out, c.Socket)
		}
	}
	return out, nil
}

// Conn is one socket of a net log (one source connected to one
// destination) with what it carried, from the socket's own events:
// whether it began a TLS handshake (a ClientHello went out:
// SSL_CONNECT began), finished one (SSL_CONNECT ended without a
// net_error), and carried a request: application data sent over TLS
// (SSL_SOCKET_BYTES_SENT), or, on a socket without TLS, any bytes sent.
// Chromium may connect several sockets for one origin and use one (a new
// HTTP/2 origin in a page's partition: testbed/README.md, session 21); a
// HAR shows only the used ones.
type Conn struct {
	Socket
	TLSStarted bool
	TLSDone    bool
	Used       bool
}

// NetLogConns reads a net log as NetLogSockets does and returns every
// socket connected, one entry per socket and destination, in the order of
// their first connect. Errors: as NetLogSockets.
func NetLogConns(path string) ([]Conn, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("browser: net log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	if !sc.Scan() {
		return nil, fmt.Errorf("browser: net log %s: empty", path)
	}
	var head struct {
		Constants struct {
			LogEventTypes map[string]int `json:"logEventTypes"`
		} `json:"constants"`
	}
	if err := json.Unmarshal(append(bytes.TrimSuffix(bytes.TrimSpace(sc.Bytes()), []byte(",")), '}'), &head); err != nil ||
		len(head.Constants.LogEventTypes) == 0 {
		return nil, fmt.Errorf("browser: net log %s: no event types on its first line (%v)", path, err)
	}
	kind := map[int]string{}
	for name, n := range head.Constants.LogEventTypes {
		kind[n] = name
	}
	type key struct {
		id   int64
		addr netip.AddrPort
	}
	var order []key
	conns := map[key]*Conn{}
	last := map[int64]key{} // a source's last connect
	wrote := map[key]bool{} // bytes sent on the socket itself (a TLS socket's include its handshake)
	for sc.Scan() {
		line := bytes.TrimSuffix(bytes.TrimSpace(sc.Bytes()), []byte(","))
		if !bytes.HasPrefix(line, []byte("{")) {
			continue
		}
		var ev struct {
			Type   int `json:"type"`
			Phase  int `json:"phase"` // 0 none, 1 begin, 2 end
			Source struct {
				ID int64 `json:"id"`
			} `json:"source"`
			Params map[string]json.RawMessage `json:"params"`
		}
		if json.Unmarshal(line, &ev) != nil {
			continue // the polled data at the end, or a line cut short
		}
		name := kind[ev.Type]
		if name == "TCP_CONNECT_ATTEMPT" || name == "TCP_CONNECT" || name == "UDP_CONNECT" {
			var a string
			if json.Unmarshal(ev.Params["address"], &a) != nil {
				continue
			}
			ap, err := netip.ParseAddrPort(a)
			if err != nil {
				continue
			}
			k := key{ev.Source.ID, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
			if conns[k] == nil {
				proto := strings.ToLower(strings.SplitN(name, "_", 2)[0])
				conns[k] = &Conn{Socket: Socket{Proto: proto, Addr: k.addr, Sent: proto == "tcp"}}
				order = append(order, k)
			}
			last[ev.Source.ID] = k
			continue
		}
		k, ok := last[ev.Source.ID]
		if !ok {
			continue
		}
		c := conns[k]
		switch name {
		case "UDP_BYTES_SENT", "SOCKET_BYTES_SENT":
			c.Sent, wrote[k] = true, true
		case "SSL_CONNECT":
			switch ev.Phase {
			case 1:
				c.TLSStarted = true
			case 2:
				_, failed := ev.Params["net_error"]
				c.TLSDone = !failed
			}
		case "SSL_SOCKET_BYTES_SENT":
			c.Used = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("browser: net log %s: %w", path, err)
	}
	out := make([]Conn, 0, len(order))
	for _, k := range order {
		c := *conns[k]
		if !c.TLSStarted {
			c.Used = wrote[k]
		}
		out = append(out, c)
	}
	return out, nil
}
