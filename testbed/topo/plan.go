package topo

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Cmd is one command of a plan: an argv run without a shell.
type Cmd []string

// String joins the argv with spaces, for logs and golden files.
func (c Cmd) String() string { return strings.Join(c, " ") }

// Plan returns the commands that build the testbed c describes, in order
// (style: plan, then execute; see Run). c must be valid (Config.Validate).
//
// The result is the Fig. 4 setup of the seed paper in namespaces:
//
//	mn radio0 ==veth== emu0 [radio] emu1 ==veth== radio0 gw wired0 ==veth== wired0 core
//
// The radio namespace holds the two ends that the link emulator bridges
// (netem's LinkSpec IfA=IfEmuA facing mn, IfB=IfEmuB facing gw); with bridge set
// they are bridged by a Linux bridge instead (no emulation). With
// c.WiredEmulated the wired link gets the same shape through a "wired"
// namespace. Every veth end is created directly in its namespace, so no
// name is ever taken in the root namespace. IPv6 is disabled everywhere, and
// segmentation and receive offloads are off on every link interface so that
// the emulator sees real packets.
func Plan(c Config, bridge bool) []Cmd {
	var p []Cmd
	add := func(args ...string) { p = append(p, Cmd(args)) }
	ns := []string{c.MNNS(), c.GWNS(), c.CoreNS(), c.RadioNS()}
	if c.WiredEmulated {
		ns = append(ns, c.WiredNS())
	}
	for _, n := range ns {
		add("ip", "netns", "add", n)
	}
	for _, n := range ns {
		add("ip", "-n", n, "link", "set", "dev", "lo", "up")
		add("ip", "netns", "exec", n, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}

	// TCP congestion control where TCP ends: phone, gateway, origin.
	for _, r := range c.CCs() {
		if r.CC != "" {
			add("ip", "netns", "exec", r.NS, "sysctl", "-qw", "net.ipv4.tcp_congestion_control="+r.CC)
		}
	}

	// Radio link: mn radio0 <-> radio a, radio b <-> gw radio0.
	add("ip", "link", "add", IfMN, "netns", c.MNNS(), "type", "veth", "peer", "name", IfEmuA, "netns", c.RadioNS())
	add("ip", "link", "add", IfGWRadio, "netns", c.GWNS(), "type", "veth", "peer", "name", IfEmuB, "netns", c.RadioNS())
	// Wired link: gw wired0 <-> core wired0, or through the wired namespace.
	if c.WiredEmulated {
		add("ip", "link", "add", IfGWWired, "netns", c.GWNS(), "type", "veth", "peer", "name", IfEmuA, "netns", c.WiredNS())
		add("ip", "link", "add", IfCore, "netns", c.CoreNS(), "type", "veth", "peer", "name", IfEmuB, "netns", c.WiredNS())
	} else {
		add("ip", "link", "add", IfGWWired, "netns", c.GWNS(), "type", "veth", "peer", "name", IfCore, "netns", c.CoreNS())
	}

	offload := func(n, dev string) {
		add("ip", "netns", "exec", n, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off")
	}
	offload(c.MNNS(), IfMN)
	offload(c.GWNS(), IfGWRadio)
	offload(c.RadioNS(), IfEmuA)
	offload(c.RadioNS(), IfEmuB)
	if c.WiredEmulated {
		offload(c.GWNS(), IfGWWired)
		offload(c.CoreNS(), IfCore)
		offload(c.WiredNS(), IfEmuA)
		offload(c.WiredNS(), IfEmuB)
	}

	emu := []string{c.RadioNS()}
	if c.WiredEmulated {
		emu = append(emu, c.WiredNS())
	}
	for _, n := range emu {
		add("ip", "-n", n, "link", "set", "dev", IfEmuA, "up")
		add("ip", "-n", n, "link", "set", "dev", IfEmuB, "up")
		if bridge {
			add("ip", "-n", n, "link", "add", "br0", "type", "bridge")
			add("ip", "-n", n, "link", "set", "dev", IfEmuA, "master", "br0")
			add("ip", "-n", n, "link", "set", "dev", IfEmuB, "master", "br0")
			add("ip", "-n", n, "link", "set", "dev", "br0", "up")
		}
	}

	// mn: one address, default route through gw.
	add("ip", "-n", c.MNNS(), "addr", "add", fmt.Sprintf("%s/%d", c.MN, c.RadioBits), "dev", IfMN)
	add("ip", "-n", c.MNNS(), "link", "set", "dev", IfMN, "up")
	add("ip", "-n", c.MNNS(), "route", "add", "default", "via", c.GWRadio.String())

	// gw: both links, the VIP, origins routed to core, forwarding on.
	add("ip", "-n", c.GWNS(), "addr", "add", fmt.Sprintf("%s/%d", c.GWRadio, c.RadioBits), "dev", IfGWRadio)
	add("ip", "-n", c.GWNS(), "addr", "add", fmt.Sprintf("%s/%d", c.GWWired, c.WiredBits), "dev", IfGWWired)
	add("ip", "-n", c.GWNS(), "addr", "add", c.VIP.String()+"/32", "dev", "lo")
	add("ip", "-n", c.GWNS(), "link", "set", "dev", IfGWRadio, "up")
	add("ip", "-n", c.GWNS(), "link", "set", "dev", IfGWWired, "up")
	add("ip", "-n", c.GWNS(), "route", "add", c.Origins.String(), "via", c.Core.String())
	add("ip", "netns", "exec", c.GWNS(), "sysctl", "-qw", "net.ipv4.ip_forward=1")
	// gw's TCP toward the radio link: idle restart and initial window.
	add("ip", "netns", "exec", c.GWNS(), "sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle="+strconv.Itoa(c.GWSlowStartAfterIdle))
	if c.GWInitCwnd > 0 {
		radio := netip.PrefixFrom(c.GWRadio, c.RadioBits).Masked()
		route := []string{"ip", "-n", c.GWNS(), "route", "replace", radio.String(), "dev", IfGWRadio, "proto", "kernel", "scope", "link",
			"src", c.GWRadio.String(), "initcwnd", strconv.Itoa(c.GWInitCwnd)}
		if len(c.GWInitCwndPorts) == 0 {
			add(route...)
		} else {
			add(append(route, "table", GWInitCwndTable)...)
			for _, port := range c.GWInitCwndPorts {
				add("ip", "-n", c.GWNS(), "rule", "add", "ipproto", "tcp", "sport", strconv.Itoa(int(port)), "lookup", GWInitCwndTable, "priority", "100")
			}
		}
	}

	// core: resolver and origin; every origin address is local (AnyIP).
	add("ip", "-n", c.CoreNS(), "addr", "add", fmt.Sprintf("%s/%d", c.Core, c.WiredBits), "dev", IfCore)
	add("ip", "-n", c.CoreNS(), "link", "set", "dev", IfCore, "up")
	add("ip", "-n", c.CoreNS(), "route", "add", "default", "via", c.GWWired.String())
	add("ip", "-n", c.CoreNS(), "route", "add", "local", c.Origins.String(), "dev", "lo")
	return p
}

// TeardownPlan returns the commands that remove what Plan built: deleting a
// namespace destroys the veth ends inside it and their peers. Processes
// started in the namespaces must be gone first, or the namespaces outlive
// their names (Topology.Close stops them before running this plan).
func TeardownPlan(c Config) []Cmd {
	ns := []string{c.MNNS(), c.GWNS(), c.CoreNS(), c.RadioNS()}
	if c.WiredEmulated {
		ns = append(ns, c.WiredNS())
	}
	var p []Cmd
	for _, n := range ns {
		p = append(p, Cmd{"ip", "netns", "del", n})
	}
	return p
}
