package chart

import (
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// render writes the whole chart: the image's label and summary, then the
// axis, the marks, the legend and the tooltip bands, or the empty text.
func (l *layout) render() template.HTML {
	w := &writer{}
	name := "chart chart-lines"
	if l.kind == bars {
		name = "chart chart-bars"
	}
	title := l.c.Title
	if title == "" {
		title = "Chart"
	}
	w.open("svg", "xmlns", "http://www.w3.org/2000/svg", "class", name,
		"viewBox", "0 0 "+num(l.width)+" "+num(l.height), "width", num(l.width), "height", num(l.height),
		"role", "img", "aria-label", title, "font-family", "system-ui, sans-serif", "font-size", "11")
	w.element("title", title)
	w.element("desc", l.summary())
	if l.empty() {
		l.drawEmpty(w)
	} else {
		l.drawAxis(w)
		if l.kind == bars {
			l.drawBars(w)
		} else {
			l.drawLines(w)
		}
		l.drawLegend(w)
		l.drawBands(w)
	}
	l.drawTimes(w)
	w.close("svg")
	return w.html()
}

func (l *layout) emptyText() string {
	if l.c.Empty != "" {
		return l.c.Empty
	}
	return NoData
}

func (l *layout) drawEmpty(w *writer) {
	w.void("line", "class", "baseline", "x1", num(l.left), "x2", num(l.right), "y1", num(l.bottom), "y2", num(l.bottom),
		"stroke", "currentColor", "stroke-opacity", "0.5")
	w.element("text", l.emptyText(), "class", "empty", "x", num((l.left+l.right)/2), "y", num((l.top+l.bottom)/2),
		"text-anchor", "middle", "fill", "currentColor")
}

// drawAxis writes a grid line and a label per tick, the zero line darker.
func (l *layout) drawAxis(w *writer) {
	w.open("g", "class", "axis", "fill", "currentColor")
	for _, v := range l.scale.ticks() {
		class, opacity := "grid", "0.15"
		if v == 0 {
			class, opacity = "baseline", "0.5"
		}
		y := num(l.y(v))
		w.void("line", "class", class, "x1", num(l.left), "x2", num(l.right), "y1", y, "y2", y,
			"stroke", "currentColor", "stroke-opacity", opacity)
		w.element("text", l.scale.tickLabel(v, l.c.Unit), "x", num(l.left-6), "y", num(l.y(v)+4), "text-anchor", "end")
	}
	w.close("g")
}

// drawTimes labels the start, the middle and the end of the window.
func (l *layout) drawTimes(w *writer) {
	w.open("g", "class", "times", "fill", "currentColor")
	mid := l.c.Start.Add(l.c.End.Sub(l.c.Start) / 2)
	for _, t := range []struct {
		at     time.Time
		anchor string
	}{{l.c.Start, "start"}, {mid, "middle"}, {l.c.End, "end"}} {
		w.element("text", l.clock(t.at), "x", num(l.x(t.at)), "y", num(l.height-6), "text-anchor", t.anchor)
	}
	w.close("g")
}

// drawBars stacks the values of each bucket, the first series at the
// bottom, with a pixel between buckets wide enough to spare it.
func (l *layout) drawBars(w *writer) {
	w.open("g", "class", "marks")
	for i, t := range l.times {
		x0, x1 := l.x(t), min(l.x(t.Add(l.step)), l.right)
		if x1-x0 > 3 {
			x0, x1 = x0+0.5, x1-0.5
		}
		base := 0.0
		for s, row := range l.values {
			if row[i] == nil || *row[i] == 0 {
				continue
			}
			top, bottom := l.y(base+*row[i]), l.y(base)
			base += *row[i]
			w.void("rect", "class", l.class(s), "x", num(x0), "y", num(top), "width", num(x1-x0),
				"height", num(bottom-top), "fill", l.color(s))
		}
	}
	w.close("g")
}

// drawLines draws each series through the middle of its buckets, a
// polyline per run of buckets with a value and a dot for a lone one.
func (l *layout) drawLines(w *writer) {
	w.open("g", "class", "marks")
	for s, row := range l.values {
		for _, run := range l.runs(row) {
			if len(run) == 1 {
				w.void("circle", "class", l.class(s), "cx", num(run[0].x), "cy", num(run[0].y), "r", "2.5", "fill", l.color(s))
				continue
			}
			points := make([]string, len(run))
			for i, p := range run {
				points[i] = num(p.x) + "," + num(p.y)
			}
			w.void("polyline", "class", l.class(s), "points", strings.Join(points, " "), "fill", "none",
				"stroke", l.color(s), "stroke-width", "2", "stroke-linejoin", "round", "stroke-linecap", "round")
		}
	}
	w.close("g")
}

// xy is a position in the chart.
type xy struct{ x, y float64 }

// runs are the positions of row's values between its gaps: a bucket
// without a value, or a bucket missing from the points when Chart.Step
// says how far apart they are.
func (l *layout) runs(row []*float64) [][]xy {
	var out [][]xy
	var run []xy
	for i, v := range row {
		missing := l.c.Step > 0 && i > 0 && l.times[i].Sub(l.times[i-1]) > l.step+l.step/2
		if v == nil || missing {
			if len(run) > 0 {
				out = append(out, run)
			}
			run = nil
		}
		if v != nil {
			run = append(run, xy{l.x(l.times[i].Add(l.step / 2)), l.y(*v)})
		}
	}
	if len(run) > 0 {
		out = append(out, run)
	}
	return out
}

// drawLegend names the series in a row above the plot, each after a
// swatch of its colour; a series without a name has no entry.
func (l *layout) drawLegend(w *writer) {
	w.open("g", "class", "legend", "fill", "currentColor")
	x := l.left
	for s, series := range l.c.Series {
		if series.Name == "" {
			continue
		}
		if l.kind == bars {
			w.void("rect", "class", l.class(s), "x", num(x), "y", "6", "width", "10", "height", "10", "fill", l.color(s))
		} else {
			w.void("line", "class", l.class(s), "x1", num(x), "x2", num(x+12), "y1", "11", "y2", "11",
				"stroke", l.color(s), "stroke-width", "2")
		}
		name := shorten(series.Name, 28)
		w.element("text", name, "x", num(x+16), "y", "15")
		x += 16 + textWidth(name) + 14
	}
	w.close("g")
}

// textWidth estimates the width of s in the chart's font: the legend needs
// no more than to keep its entries apart.
func textWidth(s string) float64 { return 6.2 * float64(utf8.RuneCountInString(s)) }

// drawBands lays a transparent band over each bucket with a value, whose
// <title> the browser shows as a tooltip: the bucket's time and values.
func (l *layout) drawBands(w *writer) {
	w.open("g", "class", "bands")
	for i, t := range l.times {
		x0, x1 := l.x(t), min(l.x(t.Add(l.step)), l.right)
		w.open("rect", "x", num(x0), "y", num(l.top), "width", num(x1-x0), "height", num(l.bottom-l.top),
			"fill", "#000", "fill-opacity", "0")
		w.element("title", l.tooltip(i))
		w.close("rect")
	}
	w.close("g")
}

func (l *layout) tooltip(i int) string {
	t := l.times[i]
	parts := make([]string, 0, len(l.values))
	for s, row := range l.values {
		parts = append(parts, strings.TrimSpace(l.c.Series[s].Name+" "+l.value(row[i])))
	}
	return l.clock(t) + "–" + t.Add(l.step).In(l.loc).Format("15:04") + ": " + strings.Join(parts, ", ")
}

// value is v as a tooltip shows it; a bar without a value is zero.
func (l *layout) value(v *float64) string {
	switch {
	case v != nil:
		return valueLabel(*v, l.c.Unit)
	case l.kind == bars:
		return valueLabel(0, l.c.Unit)
	}
	return "no data"
}

// summary is the chart's <desc>: its window, then what each series did.
func (l *layout) summary() string {
	zone := l.c.Start.In(l.loc).Format("MST")
	parts := []string{l.clock(l.c.Start) + " to " + l.clock(l.c.End) + " " + zone}
	if l.empty() {
		parts = append(parts, l.emptyText())
	} else {
		for s := range l.c.Series {
			parts = append(parts, l.seriesSummary(s))
		}
	}
	return strings.Join(parts, ". ")
}

// seriesSummary is the total and the largest bucket of a series of bars,
// the range of a line.
func (l *layout) seriesSummary(s int) string {
	var n int
	var sum, lo, hi float64
	for _, v := range l.values[s] {
		if v == nil {
			continue
		}
		if n == 0 || *v < lo {
			lo = *v
		}
		hi, sum, n = max(hi, *v), sum+*v, n+1
	}
	name := l.c.Series[s].Name
	switch {
	case l.kind == bars:
		return name + ": " + valueLabel(sum, l.c.Unit) + " in all, at most " + valueLabel(hi, l.c.Unit) + " in a bucket"
	case n == 0:
		return name + ": no data"
	case lo == hi:
		return name + ": " + valueLabel(lo, l.c.Unit)
	}
	return name + ": from " + valueLabel(lo, l.c.Unit) + " to " + valueLabel(hi, l.c.Unit)
}

// clock is t as the time labels show it: the time of day, and the day of
// the week too when the window spans a day or more.
func (l *layout) clock(t time.Time) string {
	if l.c.End.Sub(l.c.Start) >= 24*time.Hour {
		return t.In(l.loc).Format("Mon 15:04")
	}
	return t.In(l.loc).Format("15:04")
}

// class is the class attribute of the marks of series s.
func (l *layout) class(s int) string {
	return strings.TrimSpace("series-" + strconv.Itoa(s) + " " + classes(l.c.Series[s].Class))
}
