// Package optimize is pepd's optimizer: fewer bytes over the radio link for
// the same page, done once per object and variant because Squid stores what
// it returns.
//
// Where it sits. The optimizer is Squid's parent (cache_peer pep_optimizer
// in configs/squid.conf): pepd marks a request that may be optimized
// (Policy.Mark: the switch on, GET or HEAD, no Range, no request
// no-transform, site not on the exclusion list), Squid serves a hit or
// forwards the miss to Server (an httputil.ReverseProxy on 127.0.0.1),
// Server fetches from the origin through the carrier resolvers and pepd's
// guard, transforms the response if it may, and returns it to Squid, which
// stores it under Vary: Accept (images) or Accept-Encoding (text) and
// Pep-Optimize (RFC 9111 §4.1), so a request pepd did not mark never gets
// a stored variant. A hit costs no transform.
//
// What it does, file by file:
//   - image.go: Image turns a JPEG, PNG or static GIF into WebP at the
//     lowest quality (or lossless) whose SSIM against the decoded original
//     reaches the per-image target (ImageOptions.Target, default 0.95), or
//     keeps the original when nothing is smaller by MinSaving; AVIF does the
//     same with AVIF and is kept only when smaller than the WebP (libvips
//     through govips: no codec of our own).
//   - ssim.go: the SSIM of two decoded images (Wang et al. 2004, 8-bit
//     samples, 7x7 windows as scikit-image computes it), whole-image mean
//     and worst tile.
//   - text.go: IsText and Gzip for text the origin sent uncompressed
//     (klauspost/compress).
//   - server.go: Server, the parent proxy: the deadline per transform (a
//     response whose transform misses it goes out untransformed, marked
//     Pep-Deferred so Squid does not store it, the transform finishes in the background for the next miss),
//     the quick WebP (one encode, unstored) for an image the backlog turns
//     away, the AVIF variant behind the WebP, no-transform and Range honoured,
//     weak ETags per variant, Content-Length kept right.
//   - results.go: the bounded store (least recently used first out) of
//     finished transforms, keyed by transform and the SHA-256 of the
//     origin's body, for the next miss of a deferred response.
//   - policy.go: Switch (run-time on/off), Sites (the exclusion list) and
//     Policy (which requests pepd marks).
//   - config.go: Config, the optimize: section of pepd.yaml, with its
//     defaults and Validate.
//   - metrics.go: the pep_optimize_* Prometheus series.
//
// README.md in this folder gives the measured figures (bytes, SSIM, CPU per
// image) and the reasons for each choice.
package optimize
