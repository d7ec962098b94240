// Package testbed is the home of the seed paper's experiment (§4) in
// network namespaces: topo (namespaces), browser (headless Chromium),
// corpus and origin (the pages and the replay origin), run (the
// orchestration) and report (results.json, report.md, plots). This package
// itself holds only the end-to-end smoke test; see README.md.
package testbed
