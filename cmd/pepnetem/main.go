// Command pepnetem emulates the radio link: it lists and checks profiles,
// prints the tc plan, runs a link between two interfaces until stopped, and
// calibrates the emulator end to end. See netem/README.md.
//
//	pepnetem profiles
//	pepnetem show PROFILE
//	pepnetem plan [-ns NS] -a IF -b IF PROFILE
//	pepnetem run [-ns NS] -a IF -b IF [-backend auto|tc|userspace] [-seed N] [-every 10s] [-metrics :9102] PROFILE
//	pepnetem calibrate [-quick] [-backend ...] [-profiles a,b,...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"pep/netem"
	"pep/netem/calibrate"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(os.Args[1:], os.Stdout, log); err != nil {
		fmt.Fprintln(os.Stderr, "pepnetem:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  pepnetem profiles
  pepnetem show PROFILE
  pepnetem plan [-ns NS] -a IF -b IF PROFILE
  pepnetem run [-ns NS] -a IF -b IF [-backend auto|tc|userspace] [-seed N] [-every DUR] [-metrics ADDR] PROFILE
  pepnetem calibrate [-quick] [-backend auto|tc|userspace] [-profiles a,b,...]
PROFILE is a built-in name (see "pepnetem profiles") or a path to a .yaml file.`

func run(args []string, out io.Writer, log *slog.Logger) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("pepnetem "+cmd, flag.ContinueOnError)
	ns := fs.String("ns", "", "namespace of the link's two interfaces (name or path; empty: this one)")
	ifA := fs.String("a", "", "mobile-side interface (Up enters here)")
	ifB := fs.String("b", "", "network-side interface (Down enters here)")
	backend := fs.String("backend", "auto", "auto, tc or userspace")
	seed := fs.Uint64("seed", 0, "seed for loss and jitter draws (0: random, logged)")
	every := fs.Duration("every", 0, "log counters this often (0: only on exit)")
	quick := fs.Bool("quick", false, "calibrate: the short subset run by make test")
	profiles := fs.String("profiles", "", "calibrate: comma-separated profiles (default: the full or quick set)")
	metrics := fs.String("metrics", "", "run: serve Prometheus metrics on this address (e.g. :9102; empty: none)")
	nice := fs.Int("nice", -10, "run, calibrate: nice value of this process, so that packets leave on time on a busy machine")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cmd == "run" || cmd == "calibrate" {
		restore, err := netem.Renice(*nice)
		defer restore()
		if err != nil {
			log.Warn("renice failed: timing may suffer on a busy machine", "err", err)
		}
	}
	be, err := netem.ParseBackend(*backend)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	profileArg := func() (netem.Profile, error) {
		if fs.NArg() != 1 {
			return netem.Profile{}, errors.New(usage)
		}
		return netem.LoadProfile(fs.Arg(0))
	}
	switch cmd {
	case "profiles":
		for _, name := range netem.Profiles() {
			p, err := netem.LoadProfile(name)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%-20s %s\n", name, p.Description)
		}
		return nil
	case "show":
		p, err := profileArg()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s\n  file: %s\n  source: %s\n  up:   %s\n  down: %s\n", p.Name, p.File, p.Source, p.Up, p.Down)
		return nil
	case "plan":
		p, err := profileArg()
		if err != nil {
			return err
		}
		for _, c := range netem.PlanTC(netem.LinkSpec{Namespace: *ns, IfA: *ifA, IfB: *ifB}, p) {
			fmt.Fprintln(out, c)
		}
		return nil
	case "run":
		p, err := profileArg()
		if err != nil {
			return err
		}
		link, err := netem.NewLink(ctx, netem.LinkSpec{Namespace: *ns, IfA: *ifA, IfB: *ifB}, p,
			netem.Options{Backend: be, Logger: log, Seed: *seed})
		if err != nil {
			return err
		}
		if *metrics != "" {
			reg := prometheus.NewRegistry()
			reg.MustRegister(netem.NewCollector(link))
			srv := &http.Server{Addr: *metrics, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
			go func() {
				if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("metrics server", "err", err)
				}
			}()
			defer srv.Close()
		}
		var tick <-chan time.Time
		if *every > 0 {
			t := time.NewTicker(*every)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-tick:
				c := link.Counters()
				log.Info("counters", "up", fmt.Sprintf("%+v", c.Up), "down", fmt.Sprintf("%+v", c.Down))
			case <-ctx.Done():
				return link.Close()
			}
		}
	case "calibrate":
		names := calibrate.Full
		if *quick {
			names = calibrate.Quick
		}
		if *profiles != "" {
			names = strings.Split(*profiles, ",")
		}
		rs, err := calibrate.Run(ctx, calibrate.Config{Profiles: names, Backend: be, Quick: *quick, Logger: log})
		if werr := calibrate.WriteTable(out, rs); werr != nil {
			return werr
		}
		if err != nil {
			return err
		}
		if !calibrate.Passed(rs) {
			return errors.New("calibration outside tolerance")
		}
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}
