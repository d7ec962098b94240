package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"pep/testbed/report"
	"pep/testbed/run"
)

// topologyFlags are the flags of `testbed run -topology external`: the
// runner drives a testbed it did not build (deploy/docker-compose.yml).
type topologyFlags struct {
	topology string
	ext      run.External
}

func addTopologyFlags(fs *flag.FlagSet) *topologyFlags {
	t := &topologyFlags{}
	fs.StringVar(&t.topology, "topology", "netns", "netns (build the testbed in network namespaces) or external (drive one built elsewhere, e.g. the compose testbed)")
	fs.StringVar(&t.ext.GWAdmin, "gw-admin", "", "external: pepd's admin API base URL, e.g. http://10.99.0.4:9090")
	fs.StringVar(&t.ext.LinkMetrics, "link-metrics", "", "external: the link emulator's metrics URL (pepnetem run -metrics), e.g. http://10.99.0.3:9102/metrics")
	fs.StringVar(&t.ext.Hook, "gw-hook", "", "external: the gateway hook's request file (steering off/on for direct, squid cold); empty: no direct mode, warm Squid")
	return t
}

// external reports whether the run drives an external topology; other
// values than netns and external are errors.
func (t *topologyFlags) external() (bool, error) {
	switch t.topology {
	case "netns":
		return false, nil
	case "external":
		return true, nil
	}
	return false, fmt.Errorf("run: topology %q: want netns or external", t.topology)
}

// run runs the experiment on the topology the flags name.
func (t *topologyFlags) run(ctx context.Context, c run.Config, log *slog.Logger, progress io.Writer) (*report.Results, error) {
	if t.topology == "external" {
		return run.RunExternal(ctx, c, t.ext, log, progress)
	}
	return run.Run(ctx, c, log, progress)
}
