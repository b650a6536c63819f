// Package chart draws the console's small charts (deliveries, success rate
// and latency over a window) as SVG to inline in a page. The console's
// Content-Security-Policy allows no script and no inline style, so a chart
// is markup alone: colours are presentation attributes, which the policy
// does not govern and a stylesheet overrides through the classes on every
// mark; the value of each bucket is a native tooltip (a <title> on a band
// over the bucket), and the chart reads to a screen reader as one image
// with a label and a summary.
//
// The package knows nothing of deliveries: it takes series of points,
// values at times, and draws them as stacked bars (Bars) or as lines
// (Lines). Its output depends on its input only: no map order, no clock,
// fixed number formatting. Every text and attribute value it writes is
// escaped, and every number formatted by it, so the output is well-formed
// XML and safe as template.HTML.
package chart

import (
	"html/template"
	"time"
)

// Point is the value of a bucket starting at T; a nil V is no value, a gap
// in a line (a bucket without attempts has no latency).
type Point struct {
	T time.Time
	V *float64
}

// Series is a named run of points, one per bucket, in any order.
type Series struct {
	// Name is shown in the legend, the tooltips and the summary.
	Name string
	// Class is added to the classes of the series' marks and legend
	// swatch, for a stylesheet (".chart rect.ok { fill: ... }"); only
	// letters, digits, '-' and '_' are kept, and spaces separate classes.
	// Every mark also has the class "series-N", N its index.
	Class string
	// Color is the fill of its bars or the stroke of its line; empty takes
	// the palette's colour for its index.
	Color  string
	Points []Point
}

// Unit says what the values are, which sets the y axis and how numbers
// read.
type Unit int

// The units.
const (
	// Count is a number of things: whole ticks, 1.5k for 1500.
	Count Unit = iota
	// Percent is a share from 0 to 100: the axis is always 0 to 100 %,
	// and values beyond it are drawn at its ends.
	Percent
	// Millis is a duration in milliseconds: 250 ms, 1.5 s.
	Millis
)

// NoData is the text of a chart without a value, unless Chart.Empty says
// otherwise.
const NoData = "No deliveries in this window"

// The size of a chart unless Chart says otherwise, and the smallest.
const (
	DefaultWidth  = 480
	DefaultHeight = 160
	MinWidth      = 200
	MinHeight     = 100
)

// Chart is what to draw: series over the window [Start, End), cut into
// buckets of Step. A point covers [T, T+Step): a bar spans it, a line
// passes through its middle. Points outside the window are left out.
// Negative values are drawn as zero: the y axis starts at zero.
type Chart struct {
	// Title names the chart to assistive technology (aria-label and
	// <title>); the page shows its own heading.
	Title      string
	Start, End time.Time
	// Step is the width of a bucket; zero or less divides the window
	// evenly between the distinct times of the points.
	Step   time.Duration
	Unit   Unit
	Series []Series
	// Empty replaces NoData.
	Empty string
	// Width and Height are the chart's size in CSS pixels; zero takes the
	// default, less than the minimum takes the minimum. The SVG has a
	// viewBox, so a stylesheet may scale it ("width: 100%; height: auto").
	Width, Height int
	// Location is the time zone of the time labels; nil is UTC.
	Location *time.Location
}

// Bars draws c as stacked bars, the first series at the bottom: the
// deliveries of each bucket, successes under failures. A nil value counts
// as zero. A chart whose values are all zero or nil shows its empty text.
func Bars(c Chart) template.HTML {
	return newLayout(c, bars).render()
}

// Lines draws c as a line per series, broken where a bucket has no value
// (a nil V, or no point at all); a value with no neighbour is a dot. A
// chart without any value shows its empty text.
func Lines(c Chart) template.HTML {
	return newLayout(c, lines).render()
}
