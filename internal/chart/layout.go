package chart

import (
	"math"
	"slices"
	"time"
)

// kind is how a chart draws its series.
type kind int

const (
	bars kind = iota
	lines
)

// The margins around the plot area: the legend above, the time labels
// below, the value labels on the left.
const (
	marginTop    = 24
	marginBottom = 20
	marginLeft   = 50
	marginRight  = 10
)

// layout is a chart made ready to draw: its points put in buckets, its
// plot area and its y axis.
type layout struct {
	c    Chart
	kind kind
	loc  *time.Location
	step time.Duration
	// times are the distinct starts of the buckets that have a point,
	// oldest first; values[s][i] is series s at times[i], nil without a
	// value.
	times  []time.Time
	values [][]*float64
	scale  scale
	// The chart's size and its plot area.
	width, height            float64
	left, right, top, bottom float64
}

// newLayout prepares c to be drawn as k.
func newLayout(c Chart, k kind) *layout {
	l := &layout{c: c, kind: k, loc: c.Location, width: size(c.Width, DefaultWidth, MinWidth),
		height: size(c.Height, DefaultHeight, MinHeight)}
	if l.loc == nil {
		l.loc = time.UTC
	}
	l.left, l.right = marginLeft, l.width-marginRight
	l.top, l.bottom = marginTop, l.height-marginBottom
	l.bucket()
	l.step = c.Step
	if l.step <= 0 {
		l.step = c.End.Sub(c.Start) / time.Duration(max(1, len(l.times)))
	}
	l.scale = niceScale(l.max(), c.Unit)
	return l
}

// size is v, def when v is zero, least at least.
func size(v, def, least int) float64 {
	if v == 0 {
		v = def
	}
	return float64(max(v, least))
}

// bucket collects the points of the window into times and values: a
// value that is not a finite number is none, a negative one is zero, and
// the values of one series at one time add up.
func (l *layout) bucket() {
	index := map[time.Duration]int{}
	for _, s := range l.c.Series {
		for _, p := range s.Points {
			if l.inWindow(p.T) {
				index[p.T.Sub(l.c.Start)] = 0
			}
		}
	}
	offsets := make([]time.Duration, 0, len(index))
	for off := range index {
		offsets = append(offsets, off)
	}
	slices.Sort(offsets)
	for i, off := range offsets {
		index[off] = i
		l.times = append(l.times, l.c.Start.Add(off))
	}
	for _, s := range l.c.Series {
		row := make([]*float64, len(l.times))
		for _, p := range s.Points {
			if v, ok := finite(p.V); ok && l.inWindow(p.T) {
				i := index[p.T.Sub(l.c.Start)]
				if row[i] != nil {
					v += *row[i]
				}
				row[i] = &v
			}
		}
		l.values = append(l.values, row)
	}
}

func (l *layout) inWindow(t time.Time) bool {
	return !t.Before(l.c.Start) && t.Before(l.c.End)
}

// finite is *v, and false when it is nil or not a finite number; a
// negative value is zero.
func finite(v *float64) (float64, bool) {
	if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) {
		return 0, false
	}
	return max(*v, 0), true
}

// max is the highest value the axis must reach: of a stack, its sum.
func (l *layout) max() float64 {
	top := 0.0
	for i := range l.times {
		sum := 0.0
		for s := range l.values {
			if v := l.values[s][i]; v != nil {
				sum += *v
				top = max(top, *v)
			}
		}
		if l.kind == bars {
			top = max(top, sum)
		}
	}
	return top
}

// empty reports whether there is nothing to draw: no value at all, or for
// bars no value above zero.
func (l *layout) empty() bool {
	for _, row := range l.values {
		for _, v := range row {
			if v != nil && (*v > 0 || l.kind == lines) {
				return false
			}
		}
	}
	return true
}

// x is the horizontal position of t.
func (l *layout) x(t time.Time) float64 {
	span := l.c.End.Sub(l.c.Start)
	if span <= 0 {
		return l.left
	}
	return l.left + (l.right-l.left)*float64(t.Sub(l.c.Start))/float64(span)
}

// y is the vertical position of v, held inside the axis.
func (l *layout) y(v float64) float64 {
	v = min(max(v, 0), l.scale.top)
	return l.bottom - (l.bottom-l.top)*v/l.scale.top
}

// color is the colour of series s.
func (l *layout) color(s int) string {
	if c := l.c.Series[s].Color; c != "" {
		return c
	}
	return palette[s%len(palette)]
}

// palette is the console's accent, then colours told apart from it and
// from each other with a colour vision deficiency.
var palette = []string{"#2550b8", "#c25e00", "#5a6477", "#7b3fa0", "#14622f"}
