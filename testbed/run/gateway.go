package run

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"
)

// gateway drives the compose gateway: pepd's admin API and the hook.
type gateway struct {
	admin   string
	hook    string
	timeout time.Duration
	client  *http.Client
	log     *slog.Logger
	seq     int
}

// setMode puts the gateway in mode m: for direct, the steering rules
// removed (pepd and Squid see no traffic); otherwise the rules in place and
// pepd switched with PUT /mode, checked with GET /mode.
func (g *gateway) setMode(ctx context.Context, m string) error {
	if !NeedsPEP(m) {
		return g.do(ctx, "steering off")
	}
	if g.hook != "" {
		if err := g.do(ctx, "steering on"); err != nil {
			return err
		}
	}
	if _, err := g.request(ctx, http.MethodPut, m); err != nil {
		return fmt.Errorf("run: mode %s: %w", m, err)
	}
	got, err := g.request(ctx, http.MethodGet, "")
	if err != nil {
		return fmt.Errorf("run: after mode %s: %w", m, err)
	}
	if strings.TrimSpace(got) != m {
		return fmt.Errorf("run: mode %s: pepd says %q", m, strings.TrimSpace(got))
	}
	g.log.Info("mode set", "mode", m)
	return nil
}

// request sends one request to pepd's admin API /mode and returns the body
// of a 200 answer.
func (g *gateway) request(ctx context.Context, method, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, g.admin+"/mode", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "text/plain")
	resp, err := g.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s /mode: %s: %s", method, resp.Status, strings.TrimSpace(string(got)))
	}
	return string(got), nil
}

// do runs one hook command on the gateway: "SEQ COMMAND" written to the
// request file (write and rename), then Hook.done polled every 50 ms until
// it starts with "SEQ ": "SEQ ok" is success, anything else the gateway's
// error.
func (g *gateway) do(ctx context.Context, cmd string) error {
	g.seq++
	req := fmt.Sprintf("%d-%d %s", os.Getpid(), g.seq, cmd)
	tmp := g.hook + ".tmp"
	if err := os.WriteFile(tmp, []byte(req+"\n"), 0o644); err != nil {
		return fmt.Errorf("run: gateway hook: %w", err)
	}
	if err := os.Rename(tmp, g.hook); err != nil {
		return fmt.Errorf("run: gateway hook: %w", err)
	}
	id, _, _ := strings.Cut(req, " ")
	deadline := time.Now().Add(g.timeout)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		b, _ := os.ReadFile(g.hook + ".done")
		if got, ok := strings.CutPrefix(strings.TrimSpace(string(b)), id+" "); ok {
			if got != "ok" {
				return fmt.Errorf("run: gateway hook %q: %s", cmd, got)
			}
			g.log.Info("gateway hook", "command", cmd)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run: gateway hook %q: no answer in %s (is the gateway's hook running? %s)", cmd, g.timeout, g.hook)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
