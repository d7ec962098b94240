package netem

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

//go:embed profiles/*.yaml
var builtin embed.FS

// DefaultQueuePackets is the drop-tail limit used when a profile gives no
// queue: the default limit of Linux netem (tc-netem(8), "limit packets").
const DefaultQueuePackets = 1000

// Profile is a radio link: what each direction does to the packets that cross it.
// Up is from the mobile side (LinkSpec.IfA) to the network side (LinkSpec.IfB),
// Down the reverse. A Profile returned by LoadProfile or ParseProfile is valid.
type Profile struct {
	Name        string // file name without .yaml unless the file says otherwise
	Description string // one line for humans
	Source      string // where the figures come from (paper section, tool preset)
	File        string // where it was loaded from ("builtin:lte.yaml" or a path)
	Up, Down    Direction
}

// Direction is what one direction of the link does, in the order a packet
// meets it: Loss at the entrance, then the drop-tail Queue in front of the
// serializer that sends at Rate, then Delay (plus Jitter) of propagation.
type Direction struct {
	Delay  time.Duration // one-way propagation delay, >= 0
	Jitter time.Duration // delay varies uniformly in [Delay-Jitter, Delay+Jitter]; packets are never reordered
	Rate   Bitrate       // serialization rate of IP packets (IP header and payload, no Ethernet header); 0 = unlimited
	Loss   Loss
	Queue  Queue
}

// Loss is the loss model of a direction: at most one of Random and
// GilbertElliott is set; neither means no loss.
type Loss struct {
	Random         Probability     // independent (Bernoulli) loss per packet
	GilbertElliott *GilbertElliott // bursty loss; nil if unused
}

// GilbertElliott is a two-state Markov loss model, with the parameters and
// meaning of tc-netem(8) "loss gemodel p r 1-h 1-k" (Hasslinger and Hohlfeld,
// "The Gilbert-Elliott Model for Packet Loss in Real Time Services on the
// Internet", MMB 2008): per packet, the packet is lost with the loss
// probability of the current state, then the state may change.
type GilbertElliott struct {
	P        Probability // good -> bad transition probability per packet
	R        Probability // bad -> good transition probability per packet
	LossBad  Probability // loss probability in the bad state (1-h), 100% if not given
	LossGood Probability // loss probability in the good state (1-k), 0% if not given
}

// Mean is the stationary loss rate of the model: (r*(1-k) + p*(1-h)) / (p+r).
func (g GilbertElliott) Mean() float64 {
	p, r := float64(g.P), float64(g.R)
	if p+r == 0 {
		return float64(g.LossGood)
	}
	return (r*float64(g.LossGood) + p*float64(g.LossBad)) / (p + r)
}

// Mean is the long-run loss rate of l, in [0, 1].
func (l Loss) Mean() float64 {
	if l.GilbertElliott != nil {
		return l.GilbertElliott.Mean()
	}
	return float64(l.Random)
}

// Queue is the drop-tail limit of the queue in front of the serializer: the
// packets that arrived and have not finished serialization, the one being
// sent included. At most one of Packets and Bytes (IP bytes) is set; both
// zero means unlimited.
type Queue struct {
	Packets int
	Bytes   int
}

// String formats d on one line, e.g. "delay=200ms rate=81kbit loss=0% queue=50p".
func (d Direction) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "delay=%s", d.Delay)
	if d.Jitter > 0 {
		fmt.Fprintf(&b, " jitter=%s", d.Jitter)
	}
	fmt.Fprintf(&b, " rate=%s loss=%s queue=%s", d.Rate, d.Loss, d.Queue)
	return b.String()
}

// String formats l, e.g. "2%" or "ge(p=1%,r=30%,bad=100%,good=0%)".
func (l Loss) String() string {
	if g := l.GilbertElliott; g != nil {
		return fmt.Sprintf("ge(p=%s,r=%s,bad=%s,good=%s)", g.P, g.R, g.LossBad, g.LossGood)
	}
	return l.Random.String()
}

// String formats q, e.g. "50p", "30000B" or "unlimited".
func (q Queue) String() string {
	switch {
	case q.Packets > 0:
		return strconv.Itoa(q.Packets) + "p"
	case q.Bytes > 0:
		return strconv.Itoa(q.Bytes) + "B"
	}
	return "unlimited"
}

// String formats p on one line: name, then each direction.
func (p Profile) String() string {
	return fmt.Sprintf("%s up{%s} down{%s}", p.Name, p.Up, p.Down)
}

// LogValue makes a Profile log as a group of its exact configuration.
func (p Profile) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", p.Name),
		slog.String("file", p.File),
		slog.String("up", p.Up.String()),
		slog.String("down", p.Down.String()),
		slog.String("source", p.Source),
	)
}

// RTT is the round trip of the propagation delays alone (Up.Delay+Down.Delay).
func (p Profile) RTT() time.Duration { return p.Up.Delay + p.Down.Delay }

// Profiles lists the names of the built-in profiles (netem/profiles/*.yaml), sorted.
func Profiles() []string {
	ents, err := fs.ReadDir(builtin, "profiles")
	if err != nil {
		panic("netem: embedded profiles missing: " + err.Error())
	}
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// LoadProfile loads a built-in profile by name ("lte", "paper-average"; see
// Profiles) or a profile file by path (anything containing a path separator or
// ending in .yaml). Errors read "netem: FILE:LINE: FIELD: reason" (see ProfileError).
func LoadProfile(nameOrPath string) (Profile, error) {
	if strings.ContainsRune(nameOrPath, '/') || strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml") {
		data, err := os.ReadFile(nameOrPath)
		if err != nil {
			return Profile{}, fmt.Errorf("netem: profile: %w", err)
		}
		return ParseProfile(nameOrPath, data)
	}
	data, err := builtin.ReadFile(path.Join("profiles", nameOrPath+".yaml"))
	if err != nil {
		return Profile{}, fmt.Errorf("netem: no built-in profile %q (have %s)", nameOrPath, strings.Join(Profiles(), ", "))
	}
	p, err := ParseProfile("builtin:"+nameOrPath+".yaml", data)
	return p, err
}

// ProfileError is a profile that failed to parse or validate. Line is 0 when
// the problem is not tied to one line (e.g. a missing field).
type ProfileError struct {
	File  string
	Line  int
	Field string // dotted path, e.g. "up.rate"; empty for the whole file
	Err   error
}

func (e *ProfileError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field == "" {
		return fmt.Sprintf("netem: %s: %v", loc, e.Err)
	}
	return fmt.Sprintf("netem: %s: %s: %v", loc, e.Field, e.Err)
}

func (e *ProfileError) Unwrap() error { return e.Err }

// ParseProfile parses and validates a profile in YAML; file names the source
// in errors. Unknown keys, duplicate keys, bad units and impossible values are
// errors (*ProfileError). The format is described in netem/README.md.
func ParseProfile(file string, data []byte) (Profile, error) {
	p := Profile{File: file}
	base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(strings.TrimPrefix(file, "builtin:")), ".yaml"), ".yml")
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return p, &ProfileError{File: file, Err: errors.New("empty file")}
	} else if err != nil {
		return p, &ProfileError{File: file, Line: yamlErrLine(err), Err: fmt.Errorf("not valid YAML: %w", err)}
	}
	pr := &parser{file: file}
	if len(doc.Content) != 1 {
		return p, pr.errf(&doc, "", "empty document")
	}
	top := doc.Content[0]
	fields, err := pr.mapping(top, "", "name", "description", "source", "up", "down")
	if err != nil {
		return p, err
	}
	p.Name = base
	if n := fields["name"]; n != nil {
		if p.Name, err = pr.str(n, "name"); err != nil {
			return p, err
		}
		if p.Name == "" || strings.ContainsAny(p.Name, " /\t") {
			return p, pr.errf(n, "name", "%q is not a name: want letters, digits, '-' or '.'", p.Name)
		}
	}
	for _, kd := range []struct {
		key string
		dst *string
	}{{"description", &p.Description}, {"source", &p.Source}} {
		key, dst := kd.key, kd.dst
		if n := fields[key]; n != nil {
			if *dst, err = pr.str(n, key); err != nil {
				return p, err
			}
		}
	}
	for _, d := range []struct {
		key string
		dst *Direction
	}{{"up", &p.Up}, {"down", &p.Down}} {
		n := fields[d.key]
		if n == nil {
			return p, pr.errf(top, d.key, "missing: a profile gives both directions")
		}
		if *d.dst, err = pr.direction(n, d.key); err != nil {
			return p, err
		}
	}
	return p, nil
}

type parser struct{ file string }

func (pr *parser) errf(n *yaml.Node, field, format string, args ...any) error {
	return &ProfileError{File: pr.file, Line: n.Line, Field: field, Err: fmt.Errorf(format, args...)}
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// mapping checks that n is a mapping with only the allowed keys, each once,
// and returns the value nodes by key.
func (pr *parser) mapping(n *yaml.Node, field string, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, pr.errf(n, field, "want a mapping with keys %s", strings.Join(allowed, ", "))
	}
	out := make(map[string]*yaml.Node)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		known := false
		for _, a := range allowed {
			known = known || a == k.Value
		}
		if !known {
			return nil, pr.errf(k, join(field, k.Value), "unknown key (want one of %s)", strings.Join(allowed, ", "))
		}
		if out[k.Value] != nil {
			return nil, pr.errf(k, join(field, k.Value), "given twice")
		}
		out[k.Value] = v
	}
	return out, nil
}

func (pr *parser) str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", pr.errf(n, field, "want a string")
	}
	return n.Value, nil
}

func (pr *parser) duration(n *yaml.Node, field string) (time.Duration, error) {
	s, err := pr.str(n, field)
	if err != nil {
		return 0, err
	}
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, pr.errf(n, field, "%q is not a duration: want e.g. \"200ms\"", s)
	}
	if d < 0 {
		return 0, pr.errf(n, field, "%q is negative", s)
	}
	if d > time.Minute {
		return 0, pr.errf(n, field, "%q is longer than a minute", s)
	}
	return d, nil
}

func (pr *parser) prob(n *yaml.Node, field string) (Probability, error) {
	s, err := pr.str(n, field)
	if err != nil {
		return 0, err
	}
	p, err := ParseProbability(s)
	if err != nil {
		return 0, pr.errf(n, field, "%w", err)
	}
	return p, nil
}

func (pr *parser) direction(n *yaml.Node, field string) (Direction, error) {
	var d Direction
	f, err := pr.mapping(n, field, "delay", "jitter", "rate", "loss", "queue")
	if err != nil {
		return d, err
	}
	if f["delay"] == nil {
		return d, pr.errf(n, join(field, "delay"), "missing: write \"0ms\" for none")
	}
	if d.Delay, err = pr.duration(f["delay"], join(field, "delay")); err != nil {
		return d, err
	}
	if j := f["jitter"]; j != nil {
		if d.Jitter, err = pr.duration(j, join(field, "jitter")); err != nil {
			return d, err
		}
		if d.Jitter > d.Delay {
			return d, pr.errf(j, join(field, "jitter"), "%s is larger than the delay %s", d.Jitter, d.Delay)
		}
	}
	if r := f["rate"]; r != nil {
		s, err := pr.str(r, join(field, "rate"))
		if err != nil {
			return d, err
		}
		if d.Rate, err = ParseBitrate(s); err != nil {
			return d, pr.errf(r, join(field, "rate"), "%w", err)
		}
		if d.Rate > 0 && d.Rate < 8*KbitPerSecond {
			return d, pr.errf(r, join(field, "rate"), "%q is below 8kbit: a 1500-byte packet would take over 1.5 s", s)
		}
	}
	if l := f["loss"]; l != nil {
		if d.Loss, err = pr.loss(l, join(field, "loss")); err != nil {
			return d, err
		}
	}
	d.Queue = Queue{Packets: DefaultQueuePackets}
	if q := f["queue"]; q != nil {
		if d.Queue, err = pr.queue(q, join(field, "queue")); err != nil {
			return d, err
		}
	}
	return d, nil
}

func (pr *parser) loss(n *yaml.Node, field string) (Loss, error) {
	var l Loss
	f, err := pr.mapping(n, field, "random", "gilbert_elliott")
	if err != nil {
		return l, err
	}
	if f["random"] != nil && f["gilbert_elliott"] != nil {
		return l, pr.errf(n, field, "give either random or gilbert_elliott, not both")
	}
	if r := f["random"]; r != nil {
		if l.Random, err = pr.prob(r, join(field, "random")); err != nil {
			return l, err
		}
		if l.Random == 1 {
			return l, pr.errf(r, join(field, "random"), "100%% loss leaves no link")
		}
	}
	if g := f["gilbert_elliott"]; g != nil {
		gf := join(field, "gilbert_elliott")
		ge, err := pr.mapping(g, gf, "p", "r", "loss_bad", "loss_good")
		if err != nil {
			return l, err
		}
		m := GilbertElliott{LossBad: 1}
		for _, kd := range []struct {
			key string
			dst *Probability
		}{{"p", &m.P}, {"r", &m.R}, {"loss_bad", &m.LossBad}, {"loss_good", &m.LossGood}} {
			key, dst := kd.key, kd.dst
			v := ge[key]
			if v == nil {
				if key == "p" || key == "r" {
					return l, pr.errf(g, join(gf, key), "missing")
				}
				continue
			}
			if *dst, err = pr.prob(v, join(gf, key)); err != nil {
				return l, err
			}
		}
		if m.R == 0 && m.P > 0 {
			return l, pr.errf(ge["r"], join(gf, "r"), "0%% means the bad state is never left")
		}
		l.GilbertElliott = &m
	}
	return l, nil
}

func (pr *parser) queue(n *yaml.Node, field string) (Queue, error) {
	var q Queue
	f, err := pr.mapping(n, field, "packets", "bytes")
	if err != nil {
		return q, err
	}
	if (f["packets"] == nil) == (f["bytes"] == nil) {
		return q, pr.errf(n, field, "give exactly one of packets and bytes")
	}
	if v := f["packets"]; v != nil {
		s, err := pr.str(v, join(field, "packets"))
		if err != nil {
			return q, err
		}
		q.Packets, err = strconv.Atoi(s)
		if err != nil || q.Packets < 1 || q.Packets > 1e6 {
			return q, pr.errf(v, join(field, "packets"), "%q is not a count in 1..1000000", s)
		}
	}
	if v := f["bytes"]; v != nil {
		s, err := pr.str(v, join(field, "bytes"))
		if err != nil {
			return q, err
		}
		if q.Bytes, err = ParseByteSize(s); err != nil {
			return q, pr.errf(v, join(field, "bytes"), "%w", err)
		}
		if q.Bytes < 1500 {
			return q, pr.errf(v, join(field, "bytes"), "%q cannot hold one 1500-byte packet", s)
		}
	}
	return q, nil
}

// yamlErrLine extracts "line N" from a yaml.v3 syntax error, or 0.
func yamlErrLine(err error) int {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	_, rest, ok := strings.Cut(msg, "line ")
	if !ok {
		return 0
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	n, _ := strconv.Atoi(rest[:end])
	return n
}
