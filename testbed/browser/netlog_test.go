package browser

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestNetLogConns reads a net log in Chromium's file format (constants on
// the first line, one event per line; the event types named there, with
// Chromium's own names and made-up numbers) cut short as a killed browser
// leaves it: the HTTP/2 origin's six sockets of a page's first use of it
// (one carries the page, one finishes its handshake unused, four are
// abandoned after their ClientHello), a plain HTTP socket used and one
// never used, a UDP route probe; NetLogSockets folds them by destination.
func TestNetLogConns(t *testing.T) {
	log := `{"constants":{"logEventTypes":{"TCP_CONNECT":1,"TCP_CONNECT_ATTEMPT":2,"UDP_CONNECT":3,"SOCKET_BYTES_SENT":4,"UDP_BYTES_SENT":5,"SSL_CONNECT":6,"SSL_SOCKET_BYTES_SENT":7,"SOCKET_BYTES_RECEIVED":8},"timeTickOffset":1},
"events": [
{"params":{"address_list":["192.0.2.12:443"]},"phase":1,"source":{"id":10,"type":10},"time":"1","type":1},
{"params":{"address":"192.0.2.12:443"},"phase":1,"source":{"id":10,"type":10},"time":"1","type":2},
{"phase":1,"source":{"id":10,"type":10},"time":"300","type":6},
{"params":{"byte_count":1800},"phase":0,"source":{"id":10,"type":10},"time":"300","type":4},
{"phase":2,"source":{"id":10,"type":10},"time":"600","type":6},
{"params":{"byte_count":120},"phase":0,"source":{"id":10,"type":10},"time":"600","type":7},
{"params":{"address":"192.0.2.12:443"},"phase":1,"source":{"id":11,"type":10},"time":"2","type":2},
{"phase":1,"source":{"id":11,"type":10},"time":"301","type":6},
{"phase":2,"source":{"id":11,"type":10},"time":"601","type":6},
{"params":{"address":"192.0.2.12:443"},"phase":1,"source":{"id":12,"type":10},"time":"3","type":2},
{"phase":1,"source":{"id":12,"type":10},"time":"302","type":6},
{"params":{"net_error":-3},"phase":2,"source":{"id":12,"type":10},"time":"602","type":6},
{"params":{"address":"192.0.2.12:443"},"phase":1,"source":{"id":13,"type":10},"time":"3","type":2},
{"phase":1,"source":{"id":13,"type":10},"time":"302","type":6},
{"params":{"address":"192.0.2.12:443"},"phase":1,"source":{"id":14,"type":10},"time":"3","type":2},
{"phase":1,"source":{"id":14,"type":10},"time":"302","type":6},
{"params":{"address":"192.0.2.12:443"},"phase":1,"source":{"id":15,"type":10},"time":"3","type":2},
{"phase":1,"source":{"id":15,"type":10},"time":"302","type":6},
{"params":{"address":"198.19.0.1:80"},"phase":1,"source":{"id":20,"type":10},"time":"4","type":2},
{"params":{"byte_count":400},"phase":0,"source":{"id":20,"type":10},"time":"304","type":4},
{"params":{"address":"198.19.0.1:80"},"phase":1,"source":{"id":21,"type":10},"time":"5","type":2},
{"params":{"address":"[2001:4860:4860::8888]:443"},"phase":1,"source":{"id":30,"type":10},"time":"6","type":3},
{"params":{"address":"198.19.0.1:80"},"phase":1,"source":{"id":22,"ty`
	path := filepath.Join(t.TempDir(), "netlog.json")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	conns, err := NetLogConns(path)
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddrPort("192.0.2.12:443")
	origin := netip.MustParseAddrPort("198.19.0.1:80")
	probe := netip.MustParseAddrPort("[2001:4860:4860::8888]:443")
	tls := func(started, done, used bool) Conn {
		return Conn{Socket: Socket{Proto: "tcp", Addr: vip, Sent: true}, TLSStarted: started, TLSDone: done, Used: used}
	}
	want := []Conn{
		tls(true, true, true),   // the page's HTTP/2 connection
		tls(true, true, false),  // a handshake finished, never used
		tls(true, false, false), // closed with an error mid-handshake
		tls(true, false, false), // abandoned after the ClientHello
		tls(true, false, false),
		tls(true, false, false),
		{Socket: Socket{Proto: "tcp", Addr: origin, Sent: true}, Used: true},
		{Socket: Socket{Proto: "tcp", Addr: origin, Sent: true}},
		{Socket: Socket{Proto: "udp", Addr: probe}},
	}
	if !slices.Equal(conns, want) {
		t.Errorf("NetLogConns:\n got %+v\nwant %+v", conns, want)
	}
	socks, err := NetLogSockets(path)
	if err != nil {
		t.Fatal(err)
	}
	wantSocks := []Socket{{"tcp", vip, true}, {"tcp", origin, true}, {"udp", probe, false}}
	if !slices.Equal(socks, wantSocks) {
		t.Errorf("NetLogSockets: %+v, want %+v", socks, wantSocks)
	}
	if err := os.WriteFile(path, []byte("{\"constants\":{}},\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NetLogConns(path); err == nil {
		t.Error("a net log without event types: no error")
	}
}
