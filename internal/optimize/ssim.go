package optimize

import (
	"errors"
	"fmt"
)

// SSIM window and constants: Wang, Bovik, Sheikh and Simoncelli, "Image
// Quality Assessment: From Error Visibility to Structural Similarity",
// IEEE Trans. Image Processing 13(4), 2004, eq. (13), with K1 = 0.01,
// K2 = 0.03, L = 255 (8-bit samples), computed as scikit-image's
// skimage.metrics.structural_similarity does with its defaults (what
// make optimize-quality measures, testbed/quality/ssim.py): a 7x7 uniform
// window, sample covariances (the window's sums divided by N-1 = 48, not
// N), the statistics of every window that lies wholly inside the image
// (skimage filters the whole image and then crops 3 pixels at each border:
// the same windows), the mean over those windows, and for colour images
// the mean over the channels.
const (
	ssimWin = 7
	ssimC1  = (0.01 * 255) * (0.01 * 255)
	ssimC2  = (0.03 * 255) * (0.03 * 255)
)

// ssimMinSide is the smallest width or height SSIM is defined for here:
// one 7x7 window.
const ssimMinSide = ssimWin

// errSSIMSize is SSIM's answer for images smaller than one window.
var errSSIMSize = errors.New("optimize: ssim: image smaller than 7x7")

// SSIM returns the mean structural similarity of two 8-bit images of the
// same shape, interleaved samples (a and b are width*height*bands bytes,
// row by row, bands per pixel: 3 for RGB), as scikit-image 0.19's
// structural_similarity(a, b, channel_axis=2, data_range=255) computes it
// with its defaults (see ssimWin). The result is in [-1, 1]; 1 means equal
// pixels. Errors: a shape that does not match the slices' lengths, or an
// image smaller than 7x7 (errSSIMSize).
func SSIM(a, b []byte, width, height, bands int) (float64, error) {
	s, err := ssimTiles(a, b, width, height, bands, 0)
	return s.mean, err
}

// ssimStats are SSIM's mean and its lowest tile.
type ssimStats struct {
	// mean is SSIM's value (the mean over every window and channel).
	mean float64
	// worst is the lowest mean over one tile: tile x tile window
	// positions (a window's top-left corner), the last tile of a row or
	// column taking the remainder (up to 2*tile-1); mean when tile is 0 or
	// the image has one tile.
	worst float64
}

// ssimTiles computes SSIM (see SSIM) and, with tile > 0, the mean over
// each tile of the SSIM map: a mean over a whole image hides damage
// confined to a small part of it (text on a flat graphic, the subject of a
// photo on a plain background), which the lowest tile shows.
func ssimTiles(a, b []byte, width, height, bands, tile int) (ssimStats, error) {
	if width <= 0 || height <= 0 || bands <= 0 || len(a) != width*height*bands || len(b) != len(a) {
		return ssimStats{}, fmt.Errorf("optimize: ssim: %d and %d bytes for %dx%d with %d bands", len(a), len(b), width, height, bands)
	}
	if width < ssimMinSide || height < ssimMinSide {
		return ssimStats{}, errSSIMSize
	}
	nx, ny := width-ssimWin+1, height-ssimWin+1 // window positions
	tx, ty := 1, 1
	if tile > 0 {
		tx, ty = max(1, nx/tile), max(1, ny/tile)
	}
	sums := make([]float64, tx*ty)
	for c := range bands {
		ssimChannel(a, b, width, height, bands, c, func(x, y int, s float64) {
			i, j := 0, 0
			if tile > 0 {
				i, j = min(x/tile, tx-1), min(y/tile, ty-1)
			}
			sums[j*tx+i] += s
		})
	}
	var st ssimStats
	var total float64
	st.worst = 2
	for j := range ty {
		for i := range tx {
			w := tileLen(i, tx, nx, tile) * tileLen(j, ty, ny, tile) * bands
			total += sums[j*tx+i]
			st.worst = min(st.worst, sums[j*tx+i]/float64(w))
		}
	}
	st.mean = total / float64(nx*ny*bands)
	return st, nil
}

// tileLen is the number of window positions in tile i of n tiles over m
// positions (the last one takes the remainder).
func tileLen(i, n, m, tile int) int {
	if n == 1 {
		return m
	}
	if i < n-1 {
		return tile
	}
	return m - tile*(n-1)
}

// ssimChannel calls put with the SSIM of channel c at every 7x7 window
// wholly inside the image (x, y: the window's top-left corner). The
// window sums are kept exactly in integers: per column the sums over the
// window's 7 rows (updated by one row in and one out as the window moves
// down), then a running sum over 7 columns.
func ssimChannel(a, b []byte, width, height, bands, c int, put func(x, y int, s float64)) {
	const n = ssimWin * ssimWin
	const covNorm = float64(n) / float64(n-1)
	// Per column: sums of x, y, x², y², xy over the window's rows.
	cx := make([]int64, width)
	cy := make([]int64, width)
	cxx := make([]int64, width)
	cyy := make([]int64, width)
	cxy := make([]int64, width)
	addRow := func(row, sign int) {
		off := row*width*bands + c
		for x := range width {
			p, q := int64(a[off]), int64(b[off])
			off += bands
			if sign > 0 {
				cx[x] += p
				cy[x] += q
				cxx[x] += p * p
				cyy[x] += q * q
				cxy[x] += p * q
			} else {
				cx[x] -= p
				cy[x] -= q
				cxx[x] -= p * p
				cyy[x] -= q * q
				cxy[x] -= p * q
			}
		}
	}
	for r := range ssimWin - 1 {
		addRow(r, 1)
	}
	for top := 0; top+ssimWin <= height; top++ {
		addRow(top+ssimWin-1, 1)
		var sx, sy, sxx, syy, sxy int64
		for x := range width {
			sx += cx[x]
			sy += cy[x]
			sxx += cxx[x]
			syy += cyy[x]
			sxy += cxy[x]
			if x >= ssimWin {
				o := x - ssimWin
				sx -= cx[o]
				sy -= cy[o]
				sxx -= cxx[o]
				syy -= cyy[o]
				sxy -= cxy[o]
			}
			if x < ssimWin-1 {
				continue
			}
			ux, uy := float64(sx)/n, float64(sy)/n
			vx := covNorm * (float64(sxx)/n - ux*ux)
			vy := covNorm * (float64(syy)/n - uy*uy)
			vxy := covNorm * (float64(sxy)/n - ux*uy)
			put(x-ssimWin+1, top, (2*ux*uy+ssimC1)*(2*vxy+ssimC2)/((ux*ux+uy*uy+ssimC1)*(vx+vy+ssimC2)))
		}
		addRow(top, -1)
	}
}
