package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"pep/testbed/run"
)

// cmdCacheTests runs the HTTP caching test suite against Squid alone and
// against pepd+Squid (testbed/run.CacheTests), prints the Markdown report,
// writes OUT/report.md and OUT/results.json, and fails when a test that
// Squid alone passes fails through pepd; make cache-tests calls it.
func cmdCacheTests(args []string) error {
	fs := flag.NewFlagSet("testbed cache-tests", flag.ExitOnError)
	suite := fs.String("suite", "", "checkout of https://github.com/http-tests/cache-tests (required)")
	out := fs.String("out", "testbed-out/cache-tests", "folder for report.md, results.json, the raw results and the logs")
	bin := fs.String("bin", "", "folder with pepd and pepctl (default: this program's folder)")
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("cache-tests: unexpected arguments %q", fs.Args())
	}
	if *suite == "" {
		return errors.New("cache-tests: -suite is required: git clone https://github.com/http-tests/cache-tests and pass its folder (make cache-tests CACHE_TESTS=...)")
	}
	if os.Geteuid() != 0 {
		return errors.New("cache-tests: needs root (network namespaces, nftables)")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(*out, "testbed.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := slog.New(slog.NewMultiHandler(
		slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}),
		slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}),
	)).With("component", "cache-tests")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run.CacheTests(ctx, run.CacheTestsOptions{Suite: *suite, Bin: *bin, Logs: *out}, log)
	if err != nil {
		return err
	}
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	fmt.Print(md.String())
	if err := os.WriteFile(filepath.Join(*out, "report.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "results.json"), js, 0o644); err != nil {
		return err
	}
	if n := len(rep.Regressions()); n > 0 {
		return fmt.Errorf("cache-tests: %d tests that Squid alone passes fail through pepd+Squid (%s)", n, filepath.Join(*out, "report.md"))
	}
	return nil
}
