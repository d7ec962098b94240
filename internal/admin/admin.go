// Package admin is pepd's operator API, served on listen.admin (loopback by
// default; it has no authentication, so never expose it to subscribers):
//
//	GET  /mode     the current mode: "url\n", or {"mode":"url"} with Accept: application/json
//	PUT  /mode     switch mode; body "dns" (text/plain) or {"mode":"dns"} (application/json);
//	               answers the new and the previous mode. POST is accepted as well.
//	GET  /optimize the optimizer switch: "on\n" or "off\n", or {"enabled":true} with Accept: application/json
//	PUT  /optimize switch it; body "on"/"off" (text/plain) or {"enabled":true} (application/json);
//	               answers the new and the previous state. POST is accepted as well. 404 when
//	               pepd runs no optimizer switch.
//	GET  /hints    the dependency hints' switch (internal/hints), as /optimize: "on\n" or
//	               "off\n", or {"enabled":true}; PUT/POST switch it. 404 when pepd runs no hints.
//	DELETE /hints  forget every page the hints learned (the switch and counters stay)
//	GET  /cache    the cache's status (cachepolicy.Status): admission, pepd's marks, Squid's
//	               hit ratios, memory and disk objects and bytes, disk writes; text, or JSON
//	               with Accept: application/json. 404 when pepd runs no cache status.
//	GET  /metrics  Prometheus metrics
//	GET  /healthz  200 "ok" when the HTTP listener answers, 503 and the error otherwise
//
// A mode switch takes effect for the next request and DNS query; open
// connections stay open (mode.Switch). The optimizer switch is orthogonal
// to the mode and takes effect for the next request (optimize.Switch).
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"pep/internal/cachepolicy"
	"pep/internal/hints"
	"pep/internal/mode"
	"pep/internal/optimize"
)

// Options configure the admin Handler.
type Options struct {
	// Mode is the switch /mode reads and writes. Required.
	Mode *mode.Switch
	// Optimize is the switch /optimize reads and writes; nil: no /optimize.
	Optimize *optimize.Switch
	// Hints is the switch /hints reads and writes (internal/hints); nil:
	// no /hints.
	Hints *hints.Switch
	// OptimizeReset is DELETE /optimize/results: drop the optimizer's
	// finished transforms kept for the next miss
	// (optimize.Server.ResetResults); nil: no such route.
	OptimizeReset func()
	// HintsReset is DELETE /hints: forget what was learned; nil: no DELETE
	// /hints.
	HintsReset func()
	// Cache is /cache's source, called with the request's context; nil:
	// no /cache.
	Cache func(context.Context) cachepolicy.Status
	// Gatherer serves /metrics. Nil: prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Health is /healthz's check, run with a 2s deadline. Nil: always
	// healthy.
	Health func(context.Context) error
	// Log records mode changes. Nil discards.
	Log *slog.Logger
}

// ModeBody is the JSON shape of /mode requests and answers.
type ModeBody struct {
	Mode     mode.Mode  `json:"mode"`
	Previous *mode.Mode `json:"previous,omitempty"`
}

// Handler returns the admin API's handler.
func Handler(o Options) http.Handler {
	if o.Gatherer == nil {
		o.Gatherer = prometheus.DefaultGatherer
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	log := o.Log.With("component", "admin")
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if o.Health != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := o.Health(ctx); err != nil {
				http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /mode", func(w http.ResponseWriter, r *http.Request) {
		writeMode(w, r, ModeBody{Mode: o.Mode.Get()})
	})
	put := func(w http.ResponseWriter, r *http.Request) {
		m, err := readMode(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		prev := o.Mode.Set(m)
		if prev != m {
			log.Info("mode switched", "mode", m, "previous", prev, "by", r.RemoteAddr)
		}
		writeMode(w, r, ModeBody{Mode: m, Previous: &prev})
	}
	mux.HandleFunc("PUT /mode", put)
	mux.HandleFunc("POST /mode", put)
	if o.Cache != nil {
		mux.HandleFunc("GET /cache", func(w http.ResponseWriter, r *http.Request) {
			st := o.Cache(r.Context())
			if strings.Contains(r.Header.Get("Accept"), "application/json") {
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(st)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			st.WriteText(w)
		})
	}
	if o.Optimize != nil {
		onOffRoutes(mux, "/optimize", "optimizer", o.Optimize, log)
	}
	if o.Hints != nil {
		onOffRoutes(mux, "/hints", "hints", o.Hints, log)
	}
	if o.OptimizeReset != nil {
		mux.HandleFunc("DELETE /optimize/results", func(w http.ResponseWriter, r *http.Request) {
			o.OptimizeReset()
			log.Info("optimizer results emptied", "by", r.RemoteAddr)
			io.WriteString(w, "emptied\n")
		})
	}
	if o.HintsReset != nil {
		mux.HandleFunc("DELETE /hints", func(w http.ResponseWriter, r *http.Request) {
			o.HintsReset()
			log.Info("hints learner emptied", "by", r.RemoteAddr)
			io.WriteString(w, "emptied\n")
		})
	}
	return mux
}

// onOffSwitch is a run-time on/off switch (optimize.Switch, hints.Switch).
type onOffSwitch interface {
	On() bool
	Set(on bool) (prev bool)
}

// onOffRoutes serves GET, PUT and POST on path for sw, as /optimize.
func onOffRoutes(mux *http.ServeMux, path, name string, sw onOffSwitch, log *slog.Logger) {
	mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
		writeOptimize(w, r, OptimizeBody{Enabled: sw.On()})
	})
	put := func(w http.ResponseWriter, r *http.Request) {
		on, err := readOptimize(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		prev := sw.Set(on)
		if prev != on {
			log.Info(name+" switched", "enabled", on, "previous", prev, "by", r.RemoteAddr)
		}
		writeOptimize(w, r, OptimizeBody{Enabled: on, Previous: &prev})
	}
	mux.HandleFunc("PUT "+path, put)
	mux.HandleFunc("POST "+path, put)
}

// readMode parses a PUT /mode body: JSON {"mode":"url"} when the content
// type is application/json or the body starts with '{', plain text
// otherwise.
func readMode(r *http.Request) (mode.Mode, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1024))
	if err != nil {
		return 0, fmt.Errorf("admin: reading body: %w", err)
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	s := strings.TrimSpace(string(b))
	if ct == "application/json" || strings.HasPrefix(s, "{") {
		var body struct {
			Mode *mode.Mode `json:"mode"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			return 0, fmt.Errorf("admin: body %q: %w", s, err)
		}
		if body.Mode == nil {
			return 0, errors.New(`admin: body has no "mode"`)
		}
		return *body.Mode, nil
	}
	return mode.Parse(s)
}

// OptimizeBody is the JSON shape of /optimize and /hints requests and
// answers.
type OptimizeBody struct {
	Enabled  bool  `json:"enabled"`
	Previous *bool `json:"previous,omitempty"`
}

// readOptimize parses a PUT /optimize body: JSON {"enabled":true}, or
// plain text on|off (also true|false, 1|0).
func readOptimize(r *http.Request) (bool, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1024))
	if err != nil {
		return false, fmt.Errorf("admin: reading body: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if strings.HasPrefix(s, "{") {
		var body struct {
			Enabled *bool `json:"enabled"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			return false, fmt.Errorf("admin: body %q: %w", s, err)
		}
		if body.Enabled == nil {
			return false, errors.New(`admin: body has no "enabled"`)
		}
		return *body.Enabled, nil
	}
	return ParseOnOff(s)
}

// ParseOnOff parses on|off (true|false, 1|0, any case).
func ParseOnOff(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("admin: %q is not on or off", s)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func writeOptimize(w http.ResponseWriter, r *http.Request, b OptimizeBody) {
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(b)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if b.Previous != nil {
		fmt.Fprintf(w, "%s (was %s)\n", onOff(b.Enabled), onOff(*b.Previous))
		return
	}
	fmt.Fprintf(w, "%s\n", onOff(b.Enabled))
}

func writeMode(w http.ResponseWriter, r *http.Request, b ModeBody) {
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(b)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if b.Previous != nil {
		fmt.Fprintf(w, "%s (was %s)\n", b.Mode, *b.Previous)
		return
	}
	fmt.Fprintf(w, "%s\n", b.Mode)
}

// RegisterOptimizeMetrics registers pep_admin_optimize_enabled (1 on, 0
// off) and pep_admin_optimize_changes_total with reg.
func RegisterOptimizeMetrics(reg prometheus.Registerer, sw *optimize.Switch) error {
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "pep", Subsystem: "admin", Name: "optimize_enabled",
		Help: "The optimizer switch: 1 on, 0 off.",
	}, func() float64 {
		if sw.On() {
			return 1
		}
		return 0
	})); err != nil {
		return err
	}
	return reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "pep", Subsystem: "admin", Name: "optimize_changes_total",
		Help: "Optimizer switches since start (admin API, pepctl, SIGHUP).",
	}, func() float64 { return float64(sw.Changes()) }))
}

// RegisterMetrics registers pep_admin_mode{mode} (1 for the current mode,
// 0 for the others) and pep_admin_mode_changes_total with reg.
func RegisterMetrics(reg prometheus.Registerer, sw *mode.Switch) error {
	for _, m := range mode.All {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "pep", Subsystem: "admin", Name: "mode",
			Help:        "The current run-time mode (1) and the others (0).",
			ConstLabels: prometheus.Labels{"mode": m.String()},
		}, func() float64 {
			if sw.Get() == m {
				return 1
			}
			return 0
		})
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "pep", Subsystem: "admin", Name: "mode_changes_total",
		Help: "Mode switches since start (admin API, pepctl, SIGHUP).",
	}, func() float64 { return float64(sw.Changes()) }))
}
