package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
)

// A bar is one contender's figure in a chart.
type bar struct {
	label string
	value float64
}

// chartBars returns each contender's median decisions/s in cell, leaving
// out those that did not run.
func chartBars(s *resultSet, cell string, contenders []string) []bar {
	var bars []bar
	for _, c := range contenders {
		if v, ok := s.med(cell+"/"+c, "decisions/s"); ok {
			bars = append(bars, bar{c, v})
		}
	}
	return bars
}

// The bar chart's geometry, in SVG user units.
const (
	barHeight  = 26
	barGap     = 8
	labelWidth = 230 // room for the contenders' names
	plotWidth  = 520
	valueWidth = 110 // room for the figure after the longest bar
	titleSpace = 40
)

// barChart draws bars as a horizontal bar chart, sluice's in blue and the
// others in grey, each labelled with its figure.
func barChart(title string, bars []bar) []byte {
	top := 0.0
	for _, b := range bars {
		top = max(top, b.value)
	}
	width := labelWidth + plotWidth + valueWidth
	height := titleSpace + len(bars)*(barHeight+barGap) + barGap
	var out bytes.Buffer
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="14">`+"\n", width, height, width, height)
	fmt.Fprintf(&out, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&out, `<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", 8, escape(title))
	for i, b := range bars {
		y := titleSpace + i*(barHeight+barGap)
		w := 0.0
		if top > 0 {
			w = b.value / top * plotWidth
		}
		colour := "#9a9a9a"
		if isSluice(b.label) {
			colour = "#1f4e8c"
		}
		fmt.Fprintf(&out, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelWidth-8, y+barHeight*2/3, escape(b.label))
		fmt.Fprintf(&out, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelWidth, y, w, barHeight, colour)
		fmt.Fprintf(&out, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(labelWidth)+w+6, y+barHeight*2/3, thousands(b.value))
	}
	out.WriteString("</svg>\n")
	return out.Bytes()
}

func escape(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
