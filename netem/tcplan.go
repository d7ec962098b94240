package netem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Command is one external command of a plan: Args[0] is the program.
type Command struct {
	Args []string
}

func (c Command) String() string { return strings.Join(c.Args, " ") }

// BridgeName is the Linux bridge the tc backend creates in the link
// namespace to join IfA and IfB.
const BridgeName = "pepnetem0"

// PlanTC plans the ip(8) and tc(8) commands that make the link namespace
// spec.Namespace carry profile p with Linux netem (tc-netem(8), kernel >= 3.3
// for "rate" and its packet overhead): a bridge joins IfA and IfB, and
// each direction gets a netem qdisc on the interface it leaves by (Up leaves
// by IfB, Down by IfA). It is a pure function; ApplyPlan runs the result.
//
// netem's rate counts the Ethernet header, so a packet overhead of -14
// ("rate RATE -14", tc-netem(8) PACKETOVERHEAD) makes it
// count IP bytes as the userspace backend does. netem's "limit" counts every
// packet it holds, those in the delay line included, so the limit is the
// queue plus the packets one delay holds at the full rate (a byte queue is
// turned into packets of 1500 bytes). Given a rate, netem never reorders
// under jitter, matching the userspace backend. A direction with nothing to
// emulate gets no qdisc.
func PlanTC(spec LinkSpec, p Profile) []Command {
	ip := func(args ...string) Command { return Command{append(nsArgs("ip", spec.Namespace), args...)} }
	var cmds []Command
	cmds = append(cmds,
		ip("link", "add", "name", BridgeName, "type", "bridge"),
		ip("link", "set", "dev", spec.IfA, "master", BridgeName),
		ip("link", "set", "dev", spec.IfB, "master", BridgeName),
		ip("link", "set", "dev", spec.IfA, "up"),
		ip("link", "set", "dev", spec.IfB, "up"),
		ip("link", "set", "dev", BridgeName, "up"),
	)
	for _, d := range []struct {
		dev string
		dir Direction
	}{{spec.IfB, p.Up}, {spec.IfA, p.Down}} {
		if args := netemArgs(d.dir); args != nil {
			c := append(nsArgs("tc", spec.Namespace), "qdisc", "replace", "dev", d.dev, "root", "handle", "1:", "netem")
			cmds = append(cmds, Command{append(c, args...)})
		}
	}
	return cmds
}

// PlanTCTeardown plans the commands that undo PlanTC: deleting the bridge
// releases both ports, and the qdiscs are deleted one by one.
func PlanTCTeardown(spec LinkSpec, p Profile) []Command {
	var cmds []Command
	for _, d := range []struct {
		dev string
		dir Direction
	}{{spec.IfB, p.Up}, {spec.IfA, p.Down}} {
		if netemArgs(d.dir) != nil {
			cmds = append(cmds, Command{append(nsArgs("tc", spec.Namespace), "qdisc", "del", "dev", d.dev, "root")})
		}
	}
	return append(cmds, Command{append(nsArgs("ip", spec.Namespace), "link", "del", "dev", BridgeName)})
}

func nsArgs(prog, ns string) []string {
	switch {
	case ns == "":
		return []string{prog}
	case strings.ContainsRune(ns, '/'):
		// A namespace given by path (e.g. /proc/PID/ns/net) is entered with nsenter(1).
		return []string{"nsenter", "--net=" + ns, prog}
	}
	return []string{prog, "-n", ns}
}

// netemArgs gives the netem options of one direction, or nil if it does nothing.
func netemArgs(d Direction) []string {
	if d.Delay == 0 && d.Jitter == 0 && d.Rate == 0 && d.Loss.Mean() == 0 {
		return nil
	}
	limit := d.Queue.Packets
	if d.Queue.Bytes > 0 {
		limit = (d.Queue.Bytes + 1499) / 1500
	}
	if limit == 0 {
		limit = DefaultQueuePackets
	}
	if d.Rate > 0 {
		inflight := float64(d.Rate) * (d.Delay + d.Jitter).Seconds() / (8 * 1500)
		limit += int(math.Ceil(inflight))
	}
	args := []string{"limit", strconv.Itoa(limit), "delay", tcTime(d.Delay)}
	if d.Jitter > 0 {
		args = append(args, tcTime(d.Jitter))
	}
	if g := d.Loss.GilbertElliott; g != nil {
		args = append(args, "loss", "gemodel", tcPct(g.P), tcPct(g.R), tcPct(g.LossBad), tcPct(g.LossGood))
	} else if d.Loss.Random > 0 {
		args = append(args, "loss", "random", tcPct(d.Loss.Random))
	}
	if d.Rate > 0 {
		// The optional number after the rate is netem's packet overhead.
		args = append(args, "rate", strconv.FormatUint(uint64(d.Rate), 10)+"bit", "-14")
	}
	return args
}

func tcTime(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', -1, 64) + "us"
}

func tcPct(p Probability) string {
	return strconv.FormatFloat(float64(p)*100, 'f', -1, 64) + "%"
}

// UndoPlan runs every command of a teardown plan, in order, whatever fails,
// and returns the failures joined: undoing goes as far as it can.
func UndoPlan(ctx context.Context, log *slog.Logger, cmds []Command) error {
	var errs []error
	for _, c := range cmds {
		errs = append(errs, ApplyPlan(ctx, log, []Command{c}))
	}
	return errors.Join(errs...)
}

// ApplyPlan runs cmds in order and stops at the first that fails, returning
// its error with the command and its output. Each command is logged before
// it runs.
func ApplyPlan(ctx context.Context, log *slog.Logger, cmds []Command) error {
	for i, c := range cmds {
		log.Info("run", "step", i+1, "of", len(cmds), "cmd", c.String())
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, c.Args[0], c.Args[1:]...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("netem: step %d %q: %w: %s", i+1, c.String(), err, strings.TrimSpace(out.String()))
		}
	}
	return nil
}
