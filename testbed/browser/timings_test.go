package browser

import (
	"testing"

	"github.com/chromedp/cdproto/network"

	"pep/testbed/har"
)

// TestTimings derives HAR timings from Chromium ResourceTimings as
// DevTools' HAR export does: a request issued at 10.000 s, started by the
// network stack at 10.050 s (requestTime), phases in ms after it.
func TestTimings(t *testing.T) {
	none := -1.0
	for _, tc := range []struct {
		name   string
		end    float64
		timing *network.ResourceTiming
		cached bool
		want   har.Timings
	}{
		{"new connection with DNS and TLS", 10.900, &network.ResourceTiming{RequestTime: 10.050,
			DNSStart: 20, DNSEnd: 120, ConnectStart: 120, ConnectEnd: 420, SslStart: 220, SslEnd: 420, SendStart: 421, SendEnd: 422,
			ReceiveHeadersStart: 622, ReceiveHeadersEnd: 623, ProxyStart: none, ProxyEnd: none, WorkerStart: none, WorkerReady: none, PushStart: 0, PushEnd: 0},
			false,
			har.Timings{Queued: 50, Stalled: 20, Blocked: 70, DNS: 100, Connect: 300, SSL: 200, Send: 1, Wait: 200, Receive: 228}},
		{"reused connection, waited for it", 10.600, &network.ResourceTiming{RequestTime: 10.050,
			DNSStart: none, DNSEnd: none, ConnectStart: none, ConnectEnd: none, SslStart: none, SslEnd: none, SendStart: 300, SendEnd: 300,
			ReceiveHeadersStart: 500, ReceiveHeadersEnd: 501},
			false,
			har.Timings{Queued: 50, Stalled: 300, Blocked: 350, DNS: -1, Connect: -1, SSL: -1, Send: 0, Wait: 200, Receive: 50}},
		{"no header start (older Chromium): headers end", 10.600, &network.ResourceTiming{RequestTime: 10.050,
			DNSStart: none, DNSEnd: none, ConnectStart: none, ConnectEnd: none, SslStart: none, SslEnd: none, SendStart: 0, SendEnd: 1,
			ReceiveHeadersEnd: 401},
			false,
			har.Timings{Queued: 50, Stalled: 0, Blocked: 50, DNS: -1, Connect: -1, SSL: -1, Send: 1, Wait: 400, Receive: 149}},
		{"from the memory cache", 10.002, nil, true,
			har.Timings{Blocked: -1, DNS: -1, Connect: -1, SSL: -1, Receive: 2}},
		{"failed before the network", 10.300, nil, false,
			har.Timings{Blocked: 300, Queued: 300, DNS: -1, Connect: -1, SSL: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := timings(10.000, tc.end, tc.timing, tc.cached); got != tc.want {
				t.Errorf("timings =\n %+v, want\n %+v", got, tc.want)
			}
		})
	}
}
