package cli

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// frame is a chart's canvas and its plot area, in SVG user units (pixels).
type frame struct {
	width, height            float64
	left, right, top, bottom float64 // the plot area
}

// singleFrame is the chart of one algorithm, with room on the right for
// the level's axis.
var singleFrame = frame{width: 960, height: 480, left: 72, right: 888, top: 72, bottom: 420}

// comparisonFrame is the chart of several algorithms, with room on the
// right for the legend, which names each algorithm.
var comparisonFrame = frame{width: 960, height: 480, left: 72, right: 712, top: 72, bottom: 420}

// The chart's colours.
const (
	colorAdmitted = "#3a9a4f" // green
	colorRejected = "#d98c84" // muted red
	colorLevel    = "#1f4e8c" // dark blue
	colorSent     = "#d6d6d6" // light grey
	colorAxis     = "#444444"
	colorGrid     = "#e4e4e4"
	colorLimit    = "#1f4e8c" // dark blue, as the level it replaces
	colorCapacity = "#111111" // near black, dashed
	colorReleased = "#1f4e8c" // dark blue, as the level it replaces
	colorLine     = "#111111" // near black, dashed
)

// seriesColors gives each algorithm the same colour on every comparison
// chart. The colours are told apart with any of the common kinds of
// colour blindness.
var seriesColors = map[string]string{
	"token-bucket":           "#0072b2", // blue
	"gcra":                   "#e69f00", // orange
	"fixed-window":           "#d55e00", // vermilion
	"sliding-window-counter": "#009e73", // bluish green
	"sliding-window-log":     "#cc79a7", // reddish purple
	"concurrency":            "#56b4e9", // sky blue
}

// saveChart writes the chart of results to the file path: the chart of one
// algorithm, or the comparison of several.
func saveChart(path string, cfg *simConfig, results []*simResult) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-chart: %w", err)
	}
	switch {
	case cfg.down != nil:
		err = writeDownstreamChart(f, cfg, results[0])
	case cfg.shape != nil:
		err = writeShapingChart(f, cfg, results[0])
	case len(results) == 1:
		err = writeChart(f, cfg, results[0])
	default:
		err = writeComparisonChart(f, cfg, results)
	}
	if err != nil {
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
	c := newChart(w, singleFrame, cfg, res.intervals)

	maxLevel := res.startLevel
	for _, iv := range res.intervals {
		maxLevel = max(maxLevel, iv.level)
	}
	rightTop, rightStep := axisScale(max(res.capacity, maxLevel))
	yRight := c.yOf(rightTop)

	title := fmt.Sprintf("%s · %v · %s", res.alg.Name(), cfg.limit, trafficName(cfg))
	c.begin(title, fmt.Sprintf("%s in intervals of %v; level is the capacity left at each interval's end, out of %d",
		duration(cfg.duration), duration(cfg.interval), res.capacity))
	c.leftAxis()

	// The right axis's ticks, for the level.
	c.printf(`<g class="right-axis" fill="%s">`+"\n", colorLevel)
	for v := 0.0; v <= rightTop+rightStep/2; v += rightStep {
		y := yRight(v)
		c.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`, num(c.right), num(c.right+5), num(y), num(y), colorLevel)
		c.printf(`<text x="%s" y="%s">%s</text>`+"\n", num(c.right+8), num(y+4), tickLabel(v, rightStep))
	}
	c.printf(`<text transform="translate(%s,%s) rotate(90)" text-anchor="middle">level (capacity left)</text>`+"\n", num(c.width-18), num((c.top+c.bottom)/2))
	c.printf("</g>\n")

	c.bars(func(_ int, iv interval) string {
		return fmt.Sprintf("%s: sent %d, admitted %d, rejected %d, level %d", span(iv), iv.sent, iv.admitted, iv.rejected, iv.level)
	}, func(_ int, iv interval) []segment {
		return []segment{{"admitted", colorAdmitted, iv.admitted}, {"rejected", colorRejected, iv.rejected}}
	})

	// The level, measured at each interval's end.
	var pts strings.Builder
	fmt.Fprintf(&pts, "%s,%s ", num(c.xOf(0)), num(yRight(float64(res.startLevel))))
	for _, iv := range res.intervals {
		fmt.Fprintf(&pts, "%s,%s ", num(c.xOf(iv.end.Seconds())), num(yRight(float64(iv.level))))
	}
	c.printf(`<g class="level" fill="%s">`+"\n", colorLevel)
	c.printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"/>`+"\n", strings.TrimSpace(pts.String()), colorLevel)
	// Points only where they stay apart; with many intervals the line
	// alone reads better.
	if step := (c.right - c.left) / float64(len(res.intervals)); step >= 6 {
		r := min(step/4, 3.5)
		c.printf(`<circle cx="%s" cy="%s" r="%s"/>`, num(c.xOf(0)), num(yRight(float64(res.startLevel))), num(r))
		for _, iv := range res.intervals {
			c.printf(`<circle cx="%s" cy="%s" r="%s"/>`, num(c.xOf(iv.end.Seconds())), num(yRight(float64(iv.level))), num(r))
		}
		c.printf("\n")
	}
	c.printf("</g>\n")

	c.xAxis(colorLevel)

	// The legend, top right.
	lx := c.right - 300
	c.printf(`<g class="legend" fill="%s">`+"\n", colorAxis)
	c.printf(`<rect x="%s" y="52" width="12" height="12" fill="%s"/><text x="%s" y="62">admitted</text>`+"\n", num(lx), colorAdmitted, num(lx+17))
	c.printf(`<rect x="%s" y="52" width="12" height="12" fill="%s"/><text x="%s" y="62">rejected</text>`+"\n", num(lx+85), colorRejected, num(lx+102))
	c.printf(`<line x1="%s" x2="%s" y1="58" y2="58" stroke="%s" stroke-width="2"/><circle cx="%s" cy="58" r="3" fill="%s"/><text x="%s" y="62">level (right axis)</text>`+"\n",
		num(lx+170), num(lx+190), colorLevel, num(lx+180), colorLevel, num(lx+195))
	c.printf("</g>\n")

	return c.end()
}

// writeDownstreamChart writes an SVG chart of a run with a downstream
// model: a stacked bar per interval (admitted below, rejected above)
// against the left axis, and two step lines against the right axis, in
// requests per second: the limit (under -adapt, as the controller moved
// it at each update) and the downstream's capacity. The two axes share
// one scale, a second's worth of the right being an interval's worth of
// the left, so that where the limit holds the traffic back the admitted
// bars reach the limit's line.
func writeDownstreamChart(w io.Writer, cfg *simConfig, res *simResult) error {
	c := newChart(w, singleFrame, cfg, res.intervals)
	secs := cfg.interval.Seconds()
	most := float64(c.leftTop) // requests per interval
	for _, p := range res.limits {
		most = max(most, p.rate*secs)
	}
	for _, s := range cfg.down.steps {
		most = max(most, s.perSecond()*secs)
	}
	c.leftTop, c.leftStep = axisScale(int64(math.Ceil(most)))
	// y of a rate a second.
	yRate := func(v float64) float64 { return c.yLeft(v * secs) }

	limitName := "limit"
	title := fmt.Sprintf("%s · %v · %s", res.alg.Name(), cfg.limit, trafficName(cfg))
	if cfg.adapt != nil {
		limitName = "adapted limit"
		title = fmt.Sprintf("%s · limit adapted by %s from %v · %s", res.alg.Name(), cfg.adapt.name, cfg.limit, trafficName(cfg))
	}
	c.begin(title, fmt.Sprintf("downstream %s; %s in intervals of %v; lines per second (right axis)",
		cfg.down, duration(cfg.duration), duration(cfg.interval)))
	c.leftAxis()

	// The right axis, requests a second, ticked at its own round values.
	rightTop := c.leftTop / secs
	rightStep := max(niceStep(rightTop, 5), 1e-6)
	c.printf(`<g class="right-axis" fill="%s">`+"\n", colorAxis)
	for v := 0.0; v <= rightTop*(1+1e-9); v += rightStep {
		y := yRate(v)
		c.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`, num(c.right), num(c.right+5), num(y), num(y), colorAxis)
		c.printf(`<text x="%s" y="%s">%s</text>`+"\n", num(c.right+8), num(y+4), tickLabel(v, rightStep))
	}
	c.printf(`<text transform="translate(%s,%s) rotate(90)" text-anchor="middle">requests per second (lines)</text>`+"\n", num(c.width-18), num((c.top+c.bottom)/2))
	c.printf("</g>\n")

	c.bars(func(_ int, iv interval) string {
		s := fmt.Sprintf("%s: sent %d, admitted %d, rejected %d; %s %s/s, capacity %s/s at the end; mean latency %s",
			span(iv), iv.sent, iv.admitted, iv.rejected, limitName, decimal(res.limitAt(iv.end)), decimal(iv.capacity), latencyText(iv.meanLatency()))
		return s
	}, func(_ int, iv interval) []segment {
		return []segment{{"admitted", colorAdmitted, iv.admitted}, {"rejected", colorRejected, iv.rejected}}
	})
	c.xAxis(colorAxis)

	// The limit, then the capacity over it: dashed, it leaves the limit
	// in sight where the two meet.
	var capacity []limitPoint
	for _, s := range cfg.down.steps {
		capacity = append(capacity, limitPoint{time.Duration(s.at) * time.Microsecond, s.perSecond()})
	}
	// Each line is drawn over a white halo of its own path, which keeps it
	// in sight on the bars of either colour.
	line := func(class, title, color, dash string, points []limitPoint) {
		d := c.stepLine(points, yRate)
		c.printf(`<g class="%s" fill="none" stroke-width="2.5" stroke-linejoin="round"><title>%s</title>`+"\n", class, esc(title))
		c.printf(`<path d="%s" stroke="white" stroke-width="5.5" stroke-opacity="0.8"/>`+"\n", d)
		c.printf(`<path d="%s" stroke="%s"%s/>`+"\n", d, color, dash)
		c.printf("</g>\n")
	}
	line("limit", limitName, colorLimit, "", res.limits)
	line("capacity", "capacity", colorCapacity, ` stroke-dasharray="8 5"`, capacity)

	// The legend, top right.
	lx := c.right - 420
	c.printf(`<g class="legend" fill="%s">`+"\n", colorAxis)
	c.printf(`<rect x="%s" y="52" width="12" height="12" fill="%s"/><text x="%s" y="62">admitted</text>`+"\n", num(lx), colorAdmitted, num(lx+17))
	c.printf(`<rect x="%s" y="52" width="12" height="12" fill="%s"/><text x="%s" y="62">rejected</text>`+"\n", num(lx+85), colorRejected, num(lx+102))
	c.printf(`<line x1="%s" x2="%s" y1="58" y2="58" stroke="%s" stroke-width="2.5"/><text x="%s" y="62">%s</text>`+"\n",
		num(lx+170), num(lx+190), colorLimit, num(lx+195), limitName)
	c.printf(`<line x1="%s" x2="%s" y1="58" y2="58" stroke="%s" stroke-width="2.5" stroke-dasharray="8 5"/><text x="%s" y="62">capacity</text>`+"\n",
		num(lx+290), num(lx+320), colorCapacity, num(lx+325))
	c.printf("</g>\n")

	return c.end()
}

// writeShapingChart writes an SVG chart of a run in shaping mode: a
// stacked bar per interval (admitted into the line or at once below,
// rejected above, so that the bar is what was sent), and against the
// same axis two lines: a step line of the requests released in each
// interval, which is what the service behind the shaper receives, and,
// dashed, the line's length at each interval's end. Bursts in, the
// released line shows what comes out.
func writeShapingChart(w io.Writer, cfg *simConfig, res *simResult) error {
	c := newChart(w, singleFrame, cfg, res.intervals)
	most := int64(c.leftTop)
	for _, iv := range res.intervals {
		most = max(most, iv.line)
	}
	c.leftTop, c.leftStep = axisScale(most)

	c.begin(fmt.Sprintf("%s · %v · %s · shaped", res.alg.Name(), cfg.limit, trafficName(cfg)),
		fmt.Sprintf("%s; %s in intervals of %v; lines: released per interval, and in line at each interval's end",
			cfg.shape, duration(cfg.duration), duration(cfg.interval)))
	c.leftAxis()

	c.bars(func(_ int, iv interval) string {
		return fmt.Sprintf("%s: sent %d, admitted %d, rejected %d, released %d, in line at the end %d", span(iv), iv.sent, iv.admitted, iv.rejected, iv.released, iv.line)
	}, func(_ int, iv interval) []segment {
		return []segment{{"admitted", colorAdmitted, iv.admitted}, {"rejected", colorRejected, iv.rejected}}
	})
	c.xAxis(colorAxis)

	// The released requests, flat across each interval as the admitted
	// of a comparison chart are; over a white halo of its own path, which
	// keeps it in sight on the bars of either colour.
	released := make([]limitPoint, len(res.intervals))
	for i, iv := range res.intervals {
		released[i] = limitPoint{iv.start, float64(iv.released)}
	}
	d := c.stepLine(released, c.yLeft)
	c.printf(`<g class="released" fill="none" stroke-width="2.5" stroke-linejoin="round"><title>released</title>` + "\n")
	c.printf(`<path d="%s" stroke="white" stroke-width="5.5" stroke-opacity="0.8"/>`+"\n", d)
	c.printf(`<path d="%s" stroke="%s"/>`+"\n", d, colorReleased)
	c.printf("</g>\n")

	// The line's length, measured at each interval's end, from an empty
	// line at the start.
	var pts strings.Builder
	fmt.Fprintf(&pts, "%s,%s", num(c.xOf(0)), num(c.yLeft(0)))
	for _, iv := range res.intervals {
		fmt.Fprintf(&pts, " %s,%s", num(c.xOf(iv.end.Seconds())), num(c.yLeft(float64(iv.line))))
	}
	c.printf(`<g class="line" fill="none" stroke-width="1.5" stroke-linejoin="round"><title>in line</title>` + "\n")
	c.printf(`<polyline points="%s" stroke="%s" stroke-dasharray="6 4"/>`+"\n", pts.String(), colorLine)
	c.printf("</g>\n")

	// The legend, top right.
	lx := c.right - 420
	c.printf(`<g class="legend" fill="%s">`+"\n", colorAxis)
	c.printf(`<rect x="%s" y="52" width="12" height="12" fill="%s"/><text x="%s" y="62">admitted</text>`+"\n", num(lx), colorAdmitted, num(lx+17))
	c.printf(`<rect x="%s" y="52" width="12" height="12" fill="%s"/><text x="%s" y="62">rejected</text>`+"\n", num(lx+85), colorRejected, num(lx+102))
	c.printf(`<line x1="%s" x2="%s" y1="58" y2="58" stroke="%s" stroke-width="2.5"/><text x="%s" y="62">released</text>`+"\n",
		num(lx+170), num(lx+190), colorReleased, num(lx+195))
	c.printf(`<line x1="%s" x2="%s" y1="58" y2="58" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/><text x="%s" y="62">in line</text>`+"\n",
		num(lx+270), num(lx+300), colorLine, num(lx+305))
	c.printf("</g>\n")

	return c.end()
}

// stepLine returns the SVG path of a value that holds from each point to
// the next and to the end of the run: across at each value, vertical
// where it changes.
func (c *chart) stepLine(points []limitPoint, y func(float64) float64) string {
	var d strings.Builder
	fmt.Fprintf(&d, "M%s,%s", num(c.xOf(points[0].at.Seconds())), num(y(points[0].rate)))
	for _, p := range points[1:] {
		fmt.Fprintf(&d, "H%sV%s", num(c.xOf(p.at.Seconds())), num(y(p.rate)))
	}
	fmt.Fprintf(&d, "H%s", num(c.xOf(c.dur)))
	return d.String()
}

// writeComparisonChart writes an SVG chart of several algorithms' runs on
// the same traffic: a grey bar per interval for the requests sent, and for
// each algorithm a step line of the requests it admitted per interval,
// against the same axis. The legend names each algorithm with its total.
func writeComparisonChart(w io.Writer, cfg *simConfig, results []*simResult) error {
	c := newChart(w, comparisonFrame, cfg, results[0].intervals)

	c.begin(fmt.Sprintf("%d algorithms · %v · %s", len(results), cfg.limit, trafficName(cfg)),
		fmt.Sprintf("requests admitted per interval by each algorithm, sent the same requests; %s in intervals of %v",
			duration(cfg.duration), duration(cfg.interval)))
	c.leftAxis()

	c.bars(func(i int, iv interval) string {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: sent %d; admitted:", span(iv), iv.sent)
		for _, res := range results {
			fmt.Fprintf(&b, " %s %d,", res.alg.Name(), res.intervals[i].admitted)
		}
		return strings.TrimSuffix(b.String(), ",")
	}, func(_ int, iv interval) []segment {
		return []segment{{"sent", colorSent, iv.sent}}
	})

	c.xAxis("") // first, so that lines at 0 are drawn over it
	c.printf(`<g class="algorithms" fill="none" stroke-width="%s" stroke-linecap="square">`+"\n", num(seriesWidth))
	for i, res := range results {
		c.printf(`<path class="series" d="%s" stroke="%s"><title>%s</title></path>`+"\n",
			c.steps(results, i), seriesColor(res.alg.Name()), esc(res.alg.Name()))
	}
	c.printf("</g>\n")

	// The legend, right of the plot: the sent bars, then each algorithm
	// with what it admitted in all.
	lx, y := c.right+24, c.top+8
	c.printf(`<g class="legend" fill="%s">`+"\n", colorAxis)
	c.printf(`<rect x="%s" y="%s" width="20" height="12" fill="%s"/><text x="%s" y="%s">sent</text>`+"\n",
		num(lx), num(y-10), colorSent, num(lx+27), num(y))
	for i, res := range results {
		y += 32
		sum := summarize(cfg, res)
		same := "" // the first earlier algorithm that admitted just as this one
		for _, earlier := range results[:i] {
			if slices.EqualFunc(res.intervals, earlier.intervals, func(a, b interval) bool { return a.admitted == b.admitted }) {
				same = earlier.alg.Name()
				break
			}
		}
		c.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s" stroke-width="%s"/><text x="%s" y="%s">%s</text>`+"\n",
			num(lx), num(lx+20), num(y-4), num(y-4), seriesColor(res.alg.Name()), num(seriesWidth), num(lx+27), num(y), esc(res.alg.Name()))
		note := "admitted " + itoa(sum.admitted)
		if sum.share != "" {
			note += " (" + sum.share + ")"
		}
		y += 15
		c.printf(`<text x="%s" y="%s" font-size="11">%s</text>`+"\n", num(lx+27), num(y), esc(note))
		if same != "" {
			y += 14
			c.printf(`<text x="%s" y="%s" font-size="11">same as %s</text>`+"\n", num(lx+27), num(y), esc(same))
		}
	}
	c.printf(`<text x="%s" y="%s" font-size="11">where lines coincide,</text>`+"\n", num(lx), num(y+36))
	c.printf(`<text x="%s" y="%s" font-size="11">their colours alternate</text>`+"\n", num(lx), num(y+50))
	c.printf("</g>\n")

	return c.end()
}

// seriesColor returns the colour of algorithm name's line.
func seriesColor(name string) string {
	if c, ok := seriesColors[name]; ok {
		return c
	}
	return colorAxis
}

// seriesWidth is the stroke width of an algorithm's line.
const seriesWidth = 3

// stripe is the length of one colour's dash, in pixels, where the lines of
// several algorithms coincide.
const stripe = 6

// steps returns the SVG path of the r-th result's step line: across each
// interval at what it admitted there, and vertical at the boundaries where
// that changes. Where other algorithms admitted the same over the same
// intervals, their lines would hide one another, so the stretch is cut
// into dashes of about [stripe] pixels that the algorithms take in turn:
// the stretch is striped with the colour of each.
func (c *chart) steps(results []*simResult, r int) string {
	admitted := func(a, i int) int64 { return results[a].intervals[i].admitted }
	// sharers returns the algorithms that admitted v in interval i.
	sharers := func(i int, v int64) []int {
		var s []int
		for a := range results {
			if admitted(a, i) == v {
				s = append(s, a)
			}
		}
		return s
	}
	var d strings.Builder
	n := len(c.intervals)
	for i := 0; i < n; {
		v := admitted(r, i)
		with := sharers(i, v)
		// The stretch runs on while the value and who shares it stay.
		j := i + 1
		for j < n && admitted(r, j) == v && slices.Equal(sharers(j, v), with) {
			j++
		}
		x0, x1, y := c.xOf(c.intervals[i].start.Seconds()), c.xOf(c.intervals[j-1].end.Seconds()), c.yLeft(float64(v))
		k := len(with)
		dashes := k * max(1, int((x1-x0)/(stripe*float64(k))))
		for p := slices.Index(with, r); p < dashes; p += k {
			fmt.Fprintf(&d, "M%s,%sH%s", num(x0+float64(p)*(x1-x0)/float64(dashes)), num(y), num(x0+float64(p+1)*(x1-x0)/float64(dashes)))
		}
		if j < n && admitted(r, j) != v {
			fmt.Fprintf(&d, "M%s,%sV%s", num(x1), num(y), num(c.yLeft(float64(admitted(r, j)))))
		}
		i = j
	}
	return d.String()
}

// segment is one part of a stacked bar: a count of requests drawn in a
// colour, with a class naming it.
type segment struct {
	class, color string
	n            int64
}

// newChart returns a chart of intervals over cfg's duration drawn in f,
// writing to w through a buffer that [chart.end] flushes. The left axis
// counts requests per interval, up to the most sent in any one.
func newChart(w io.Writer, f frame, cfg *simConfig, intervals []interval) *chart {
	c := &chart{w: bufio.NewWriter(w), frame: f, dur: cfg.duration.Seconds(), intervals: intervals}
	var maxSent int64
	for _, iv := range intervals {
		maxSent = max(maxSent, iv.sent)
	}
	c.leftTop, c.leftStep = axisScale(maxSent)
	return c
}

// axisScale returns the top of an axis that shows values up to most, and
// the round step between its ticks.
func axisScale(most int64) (top, step float64) {
	step = max(niceStep(float64(most), 5), 1)
	return max(math.Ceil(float64(most)/step)*step, step), step
}

// xOf returns the x coordinate of secs seconds from the start.
func (c *chart) xOf(secs float64) float64 { return c.left + secs/c.dur*(c.right-c.left) }

// yOf returns the function that places a value on an axis whose top is top.
func (c *chart) yOf(top float64) func(float64) float64 {
	return func(n float64) float64 { return c.bottom - n/top*(c.bottom-c.top) }
}

// yLeft returns the y coordinate of n requests per interval.
func (c *chart) yLeft(n float64) float64 { return c.yOf(c.leftTop)(n) }

// begin writes the SVG's start: the canvas, the title and, below it, the
// subtitle.
func (c *chart) begin(title, subtitle string) {
	c.printf(`<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="12">
`, num(c.width), num(c.height), num(c.width), num(c.height))
	c.printf("<title>%s</title>\n", esc(title))
	c.printf(`<rect width="%s" height="%s" fill="white"/>`+"\n", num(c.width), num(c.height))
	c.printf(`<text x="%s" y="26" font-size="16" font-weight="bold">%s</text>`+"\n", num(c.left), esc(title))
	c.printf(`<text x="%s" y="46" fill="%s">%s</text>`+"\n", num(c.left), colorAxis, esc(subtitle))
}

// leftAxis writes the horizontal grid and the left axis's ticks, for
// requests per interval.
func (c *chart) leftAxis() {
	c.printf(`<g class="left-axis" fill="%s" text-anchor="end">`+"\n", colorAxis)
	for v := 0.0; v <= c.leftTop+c.leftStep/2; v += c.leftStep {
		y := c.yLeft(v)
		c.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`, num(c.left), num(c.right), num(y), num(y), colorGrid)
		c.printf(`<text x="%s" y="%s">%s</text>`+"\n", num(c.left-8), num(y+4), tickLabel(v, c.leftStep))
	}
	c.printf(`<text transform="translate(18,%s) rotate(-90)" text-anchor="middle">requests per interval</text>`+"\n", num((c.top+c.bottom)/2))
	c.printf("</g>\n")
}

// bars writes a bar per interval against the left axis, stacking the
// segments that parts returns for the i-th interval from the bottom up and
// leaving out those of no requests; title gives the text shown when the
// pointer rests on the bar.
// Wide bars get a gap between them; narrow ones touch, and overlap a
// little so that anti-aliasing leaves no seams.
func (c *chart) bars(title func(int, interval) string, parts func(int, interval) []segment) {
	c.printf("<g class=\"bars\">\n")
	for i, iv := range c.intervals {
		x0, x1 := c.xOf(iv.start.Seconds()), c.xOf(iv.end.Seconds())
		gap := 0.0
		if x1-x0 >= 6 {
			gap = min((x1-x0)*0.2, 12)
		} else {
			x1 += 0.3
		}
		x, width := x0+gap/2, x1-x0-gap
		c.printf(`<g class="bar"><title>%s</title>`, esc(title(i, iv)))
		var below int64
		for _, s := range parts(i, iv) {
			if s.n <= 0 {
				continue
			}
			y0, y1 := c.yLeft(float64(below)), c.yLeft(float64(below+s.n))
			c.printf(`<rect class="%s" x="%s" y="%s" width="%s" height="%s" fill="%s"/>`,
				s.class, num(x), num(y1), num(width), num(y0-y1), s.color)
			below += s.n
		}
		c.printf("</g>\n")
	}
	c.printf("</g>\n")
}

// xAxis writes the x axis, in seconds, and the plot's left edge; and its
// right edge in the colour right, unless right is "".
func (c *chart) xAxis(right string) {
	c.printf(`<g class="x-axis" fill="%s" stroke="%s">`+"\n", colorAxis, colorAxis)
	c.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s"/>`+"\n", num(c.left), num(c.right), num(c.bottom), num(c.bottom))
	c.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s"/>`+"\n", num(c.left), num(c.left), num(c.top), num(c.bottom))
	if right != "" {
		c.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"/>`+"\n", num(c.right), num(c.right), num(c.top), num(c.bottom), right)
	}
	xStep := niceStep(c.dur, 10)
	for i := 0; float64(i)*xStep <= c.dur*(1+1e-9); i++ {
		v := float64(i) * xStep
		x := c.xOf(v)
		c.printf(`<line x1="%s" x2="%s" y1="%s" y2="%s"/>`, num(x), num(x), num(c.bottom), num(c.bottom+5))
		c.printf(`<text x="%s" y="%s" text-anchor="middle" stroke="none">%s</text>`+"\n", num(x), num(c.bottom+19), tickLabel(v, xStep))
	}
	c.printf(`<text x="%s" y="%s" text-anchor="middle" stroke="none">time (s)</text>`+"\n", num((c.left+c.right)/2), num(c.bottom+40))
	c.printf("</g>\n")
}

// end closes the SVG and flushes it, returning the first error.
func (c *chart) end() error {
	c.printf("</svg>\n")
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}

// chart writes an SVG chart of a run's intervals, keeping the first
// error.
type chart struct {
	frame
	w                 *bufio.Writer
	err               error
	dur               float64 // the run's duration, seconds
	intervals         []interval
	leftTop, leftStep float64 // the left axis's top and tick step, requests
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
