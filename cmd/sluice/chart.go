package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// The chart's geometry, in SVG user units (pixels).
const (
	chartWidth  = 960
	chartHeight = 480
	plotLeft    = 72  // room for the left axis's labels
	plotRight   = 888 // chartWidth minus room for the right axis's labels
	plotTop     = 72  // room for the title and the legend
	plotBottom  = 420 // chartHeight minus room for the x axis's labels
)

// The chart's colours.
const (
	colorAdmitted = "#3a9a4f" // green
	colorRejected = "#d98c84" // muted red
	colorLevel    = "#1f4e8c" // dark blue
	colorAxis     = "#444444"
	colorGrid     = "#e4e4e4"
)

// saveChart writes the chart of res to the file path.
func saveChart(path string, cfg *simConfig, res *simResult) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-chart: %w", err)
	}
	if err := writeChart(f, cfg, res); err != nil {
		f.Close()
		return fmt.Errorf("-chart: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-chart: %w", err)
	}
	return nil
}

// writeChart writes an SVG chart of res: a stacked bar per interval
// (admitted below, rejected above) against the left axis, and the level at
// each interval's end as a line against the right axis.
func writeChart(w io.Writer, cfg *simConfig, res *simResult) error {
	bw := bufio.NewWriter(w)
	c := &chart{w: bw}

	dur := cfg.duration.Seconds()
	xOf := func(secs float64) float64 { return plotLeft + secs/dur*(plotRight-plotLeft) }

	var maxSent int64
	for _, iv := range res.intervals {
		maxSent = max(maxSent, iv.sent)
	}
	leftStep := max(niceStep(float64(maxSent), 5), 1)
	leftTop := max(math.Ceil(float64(maxSent)/leftStep)*leftStep, leftStep)
	yLeft := func(n float64) float64 { return plotBottom - n/leftTop*(plotBottom-plotTop) }

	maxLevel := res.startLevel
	for _, iv := range res.intervals {
		maxLevel = max(maxLevel, iv.level)
	}
	rightStep := max(niceStep(float64(max(res.capacity, maxLevel)), 5), 1)
	rightTop := max(math.Ceil(float64(max(res.capacity, maxLevel))/rightStep)*rightStep, rightStep)
	yRight := func(n float64) float64 { return plotBottom - n/rightTop*(plotBottom-plotTop) }

	title := fmt.Sprintf("%s · %v · %s", cfg.alg.Name(), cfg.limit, trafficName(cfg))
	c.printf(`<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
`, chartWidth, chartHeight, chartWidth, chartHeight)
	c.printf("<title>%s</title>\n", esc(title))
	c.printf(`<rect width="%d" height="%d" fill="white"/>`+"\n", chartWidth, chartHeight)
	c.printf(`<text x="%d" y="26" font-size="16" font-weight="bold">%s</text>`+"\n", plotLeft, esc(title))
	c.printf(`<text x="%d" y="46" fill="%s">%s in intervals of %v; level is the capacity left at each interval's end, out of %d</text>`+"\n",
		plotLeft, colorAxis, duration(cfg.duration), duration(cfg.interval), res.capacity)

	// Horizontal grid and the left axis's ticks.
	c.printf(`<g class="left-axis" fill="%s" text-anchor="end">`+"\n", colorAxis)
	for v := 0.0; v <= leftTop+leftStep/2; v += leftStep {
		y := yLeft(v)
		c.printf(`<line x1="%d" x2="%d" y1="%s" y2="%s" stroke="%s"/>`, plotLeft, plotRight, num(y), num(y), colorGrid)
		c.printf(`<text x="%d" y="%s">%s</text>`+"\n", plotLeft-8, num(y+4), tickLabel(v, leftStep))
	}
	c.printf(`<text transform="translate(18,%s) rotate(-90)" text-anchor="middle">requests per interval</text>`+"\n", num((plotTop+plotBottom)/2))
	c.printf("</g>\n")

	// The right axis's ticks, for the level.
	c.printf(`<g class="right-axis" fill="%s">`+"\n", colorLevel)
	for v := 0.0; v <= rightTop+rightStep/2; v += rightStep {
		y := yRight(v)
		c.printf(`<line x1="%d" x2="%d" y1="%s" y2="%s" stroke="%s"/>`, plotRight, plotRight+5, num(y), num(y), colorLevel)
		c.printf(`<text x="%d" y="%s">%s</text>`+"\n", plotRight+8, num(y+4), tickLabel(v, rightStep))
	}
	c.printf(`<text transform="translate(%d,%s) rotate(90)" text-anchor="middle">level (capacity left)</text>`+"\n", chartWidth-18, num((plotTop+plotBottom)/2))
	c.printf("</g>\n")

	// The bars. Wide bars get a gap between them; narrow ones touch, and
	// overlap a little so that anti-aliasing leaves no seams.
	c.printf("<g class=\"bars\">\n")
	for _, iv := range res.intervals {
		x0, x1 := xOf(iv.start.Seconds()), xOf(iv.end.Seconds())
		gap := 0.0
		if x1-x0 >= 6 {
			gap = min((x1-x0)*0.2, 12)
		} else {
			x1 += 0.3
		}
		x, width := x0+gap/2, x1-x0-gap
		c.printf(`<g class="bar"><title>%s: sent %d, admitted %d, rejected %d, level %d</title>`,
			span(iv), iv.sent, iv.admitted, iv.rejected, iv.level)
		yA := yLeft(float64(iv.admitted))
		if iv.admitted > 0 {
			c.printf(`<rect class="admitted" x="%s" y="%s" width="%s" height="%s" fill="%s"/>`,
				num(x), num(yA), num(width), num(plotBottom-yA), colorAdmitted)
		}
		if iv.rejected > 0 {
			yR := yLeft(float64(iv.admitted + iv.rejected))
			c.printf(`<rect class="rejected" x="%s" y="%s" width="%s" height="%s" fill="%s"/>`,
				num(x), num(yR), num(width), num(yA-yR), colorRejected)
		}
		c.printf("</g>\n")
	}
	c.printf("</g>\n")

	// The level, measured at each interval's end.
	var pts strings.Builder
	fmt.Fprintf(&pts, "%s,%s ", num(xOf(0)), num(yRight(float64(res.startLevel))))
	for _, iv := range res.intervals {
		fmt.Fprintf(&pts, "%s,%s ", num(xOf(iv.end.Seconds())), num(yRight(float64(iv.level))))
	}
	c.printf(`<g class="level" fill="%s">`+"\n", colorLevel)
	c.printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"/>`+"\n", strings.TrimSpace(pts.String()), colorLevel)
	// Points only where they stay apart; with many intervals the line
	// alone reads better.
	if step := float64(plotRight-plotLeft) / float64(len(res.intervals)); step >= 6 {
		r := min(step/4, 3.5)
		c.printf(`<circle cx="%s" cy="%s" r="%s"/>`, num(xOf(0)), num(yRight(float64(res.startLevel))), num(r))
		for _, iv := range res.intervals {
			c.printf(`<circle cx="%s" cy="%s" r="%s"/>`, num(xOf(iv.end.Seconds())), num(yRight(float64(iv.level))), num(r))
		}
		c.printf("\n")
	}
	c.printf("</g>\n")

	// The x axis, in seconds.
	c.printf(`<g class="x-axis" fill="%s" stroke="%s">`+"\n", colorAxis, colorAxis)
	c.printf(`<line x1="%d" x2="%d" y1="%d" y2="%d"/>`+"\n", plotLeft, plotRight, plotBottom, plotBottom)
	c.printf(`<line x1="%d" x2="%d" y1="%d" y2="%d"/>`+"\n", plotLeft, plotLeft, plotTop, plotBottom)
	c.printf(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s"/>`+"\n", plotRight, plotRight, plotTop, plotBottom, colorLevel)
	xStep := niceStep(dur, 10)
	for i := 0; float64(i)*xStep <= dur*(1+1e-9); i++ {
		v := float64(i) * xStep
		x := xOf(v)
		c.printf(`<line x1="%s" x2="%s" y1="%d" y2="%d"/>`, num(x), num(x), plotBottom, plotBottom+5)
		c.printf(`<text x="%s" y="%d" text-anchor="middle" stroke="none">%s</text>`+"\n", num(x), plotBottom+19, tickLabel(v, xStep))
	}
	c.printf(`<text x="%s" y="%d" text-anchor="middle" stroke="none">time (s)</text>`+"\n", num((plotLeft+plotRight)/2), plotBottom+40)
	c.printf("</g>\n")

	// The legend, top right.
	lx := plotRight - 300
	c.printf(`<g class="legend" fill="%s">`+"\n", colorAxis)
	c.printf(`<rect x="%d" y="52" width="12" height="12" fill="%s"/><text x="%d" y="62">admitted</text>`+"\n", lx, colorAdmitted, lx+17)
	c.printf(`<rect x="%d" y="52" width="12" height="12" fill="%s"/><text x="%d" y="62">rejected</text>`+"\n", lx+85, colorRejected, lx+102)
	c.printf(`<line x1="%d" x2="%d" y1="58" y2="58" stroke="%s" stroke-width="2"/><circle cx="%d" cy="58" r="3" fill="%s"/><text x="%d" y="62">level (right axis)</text>`+"\n",
		lx+170, lx+190, colorLevel, lx+180, colorLevel, lx+195)
	c.printf("</g>\n")

	c.printf("</svg>\n")
	if c.err != nil {
		return c.err
	}
	return bw.Flush()
}

// chart writes SVG text, keeping the first error.
type chart struct {
	w   io.Writer
	err error
}

func (c *chart) printf(format string, args ...any) {
	if c.err == nil {
		_, c.err = fmt.Fprintf(c.w, format, args...)
	}
}

// esc escapes s for use as XML character data or an attribute value.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// num formats a coordinate with at most two decimals.
func num(x float64) string {
	s := strconv.FormatFloat(x, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// niceStep returns a round step (1, 2 or 5 times a power of ten) that cuts
// span into about n parts.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw*(1-1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

// tickLabel formats a tick value with as many decimals as its step needs.
func tickLabel(v, step float64) string {
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	}
	return s
}
