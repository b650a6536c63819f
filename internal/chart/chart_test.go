package chart

import (
	"encoding/xml"
	"errors"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// node is an element of a parsed chart.
type node struct {
	name     string
	attr     map[string]string
	text     string
	children []*node
}

// parse reads a chart as XML, failing t unless it is well-formed, and
// checks what every chart must be: an accessible image of known elements,
// without script, style or event handler, whose coordinates are finite
// numbers inside it.
func parse(t *testing.T, h template.HTML) *node {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(h)))
	root := &node{}
	stack := []*node{root}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "not well-formed XML:\n%s", h)
		top := stack[len(stack)-1]
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &node{name: tok.Name.Local, attr: map[string]string{}}
			for _, a := range tok.Attr {
				n.attr[a.Name.Local] = a.Value
			}
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			top.text += string(tok)
		default:
			t.Fatalf("unexpected %T in a chart", tok)
		}
	}
	require.Len(t, root.children, 1)
	svg := root.children[0]
	require.Equal(t, "svg", svg.name)
	require.Equal(t, "img", svg.attr["role"])
	require.NotEmpty(t, svg.attr["aria-label"])
	require.Equal(t, "title", svg.children[0].name)
	require.Equal(t, svg.attr["aria-label"], svg.children[0].text)
	require.Equal(t, "desc", svg.children[1].name)
	checkElements(t, svg)
	return svg
}

var allowed = map[string]bool{"svg": true, "title": true, "desc": true, "g": true, "line": true, "text": true,
	"rect": true, "polyline": true, "circle": true}

func checkElements(t *testing.T, n *node) {
	t.Helper()
	require.True(t, allowed[n.name], "element %s", n.name)
	w, _ := strconv.ParseFloat(n.attr["width"], 64)
	for name, v := range n.attr {
		require.False(t, name == "style" || strings.HasPrefix(name, "on") || name == "href", "attribute %s", name)
		switch name {
		case "x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "width", "height":
			inside(t, n.name+" "+name, v)
		case "points":
			for _, p := range strings.Fields(v) {
				x, y, ok := strings.Cut(p, ",")
				require.True(t, ok, "point %q", p)
				inside(t, "x", x)
				inside(t, "y", y)
			}
		}
	}
	if n.name == "svg" {
		require.Positive(t, w)
	}
	for _, c := range n.children {
		checkElements(t, c)
	}
}

// inside checks that v is a coordinate in a chart of at most the default
// size: a finite number from zero on, in the package's format.
func inside(t *testing.T, what, v string) {
	t.Helper()
	f, err := strconv.ParseFloat(v, 64)
	require.NoError(t, err, "%s %q", what, v)
	require.True(t, f >= 0 && f <= DefaultWidth, "%s %q", what, v)
	require.Equal(t, num(f), v, "%s: fixed formatting", what)
}

// all are the descendants of n named name, in document order.
func (n *node) all(name string) []*node {
	var out []*node
	for _, c := range n.children {
		if c.name == name {
			out = append(out, c)
		}
		out = append(out, c.all(name)...)
	}
	return out
}

// group is n's child g of the class.
func (n *node) group(t *testing.T, class string) *node {
	t.Helper()
	for _, c := range n.children {
		if c.name == "g" && c.attr["class"] == class {
			return c
		}
	}
	t.Fatalf("no group %s", class)
	return nil
}

func (n *node) hasGroup(class string) bool {
	for _, c := range n.children {
		if c.name == "g" && c.attr["class"] == class {
			return true
		}
	}
	return false
}

func texts(nodes []*node) []string {
	out := []string{}
	for _, n := range nodes {
		out = append(out, n.text)
	}
	return out
}

func v(f float64) *float64 { return &f }

var t0 = time.Date(2026, 5, 4, 14, 0, 0, 0, time.UTC) // a Monday

// minutes are points a minute apart from t0, nil where a value is NaN.
func minutes(values ...float64) []Point {
	out := []Point{}
	for i, f := range values {
		p := Point{T: t0.Add(time.Duration(i) * time.Minute)}
		if !math.IsNaN(f) {
			p.V = v(f)
		}
		out = append(out, p)
	}
	return out
}

var gap = math.NaN()

func hour(unit Unit, series ...Series) Chart {
	return Chart{Title: "Deliveries", Start: t0, End: t0.Add(time.Hour), Step: time.Minute, Unit: unit, Series: series}
}

// The plot area of a default chart: x from 50 to 470, y from 24 to 140.
func TestBarsStackEachBucket(t *testing.T) {
	t.Parallel()
	c := Chart{Title: "Deliveries", Start: t0, End: t0.Add(3 * time.Minute), Step: time.Minute, Series: []Series{
		{Name: "succeeded", Class: "ok", Color: "#14622f", Points: minutes(2, 0, 4)},
		{Name: "failed", Class: "bad fail", Points: minutes(1, gap, 0)},
	}}
	svg := parse(t, Bars(c))
	require.Equal(t, "chart chart-bars", svg.attr["class"])
	require.Equal(t, "0 0 480 160", svg.attr["viewBox"])
	// The axis: 0 to 4 in steps of 1, 29 pixels each.
	require.Equal(t, []string{"0", "1", "2", "3", "4"}, texts(svg.group(t, "axis").all("text")))

	var got [][6]string
	for _, r := range svg.group(t, "marks").all("rect") {
		got = append(got, [6]string{r.attr["class"], r.attr["x"], r.attr["y"], r.attr["width"], r.attr["height"], r.attr["fill"]})
	}
	require.Equal(t, [][6]string{
		{"series-0 ok", "50.5", "82", "139", "58", "#14622f"},
		{"series-1 bad fail", "50.5", "53", "139", "29", "#c25e00"},
		{"series-0 ok", "330.5", "24", "139", "116", "#14622f"},
	}, got, "no bar for a zero or a nil")

	legend := svg.group(t, "legend")
	require.Equal(t, []string{"succeeded", "failed"}, texts(legend.all("text")))
	require.Equal(t, "series-1 bad fail", legend.all("rect")[1].attr["class"])

	require.Equal(t, []string{
		"14:00–14:01: succeeded 2, failed 1",
		"14:01–14:02: succeeded 0, failed 0",
		"14:02–14:03: succeeded 4, failed 0",
	}, texts(svg.group(t, "bands").all("title")))
	require.Equal(t, "14:00 to 14:03 UTC. succeeded: 6 in all, at most 4 in a bucket. failed: 1 in all, at most 1 in a bucket",
		svg.children[1].text)
}

func TestLinesBreakAtGaps(t *testing.T) {
	t.Parallel()
	// Six buckets of 70 pixels; a line passes through their middles.
	c := Chart{Title: "Latency", Start: t0, End: t0.Add(6 * time.Minute), Step: time.Minute, Unit: Millis, Series: []Series{
		{Name: "p50", Points: minutes(10, gap, 20, 30, gap, 40)},
		{Name: "p95", Points: minutes(gap, gap, gap, gap, gap, gap)},
	}}
	svg := parse(t, Lines(c))
	require.Equal(t, "chart chart-lines", svg.attr["class"])
	require.Equal(t, []string{"0 ms", "10 ms", "20 ms", "30 ms", "40 ms"}, texts(svg.group(t, "axis").all("text")))
	marks := svg.group(t, "marks")
	lines := marks.all("polyline")
	require.Len(t, lines, 1)
	require.Equal(t, "225,82 295,53", lines[0].attr["points"])
	require.Equal(t, "none", lines[0].attr["fill"])
	require.Equal(t, "#2550b8", lines[0].attr["stroke"])
	var dots []string
	for _, d := range marks.all("circle") {
		dots = append(dots, d.attr["cx"]+","+d.attr["cy"])
	}
	require.Equal(t, []string{"85,111", "435,24"}, dots, "a value without a neighbour is a dot")
	require.Equal(t, "14:03–14:04: p50 30 ms, p95 no data", svg.group(t, "bands").all("title")[3].text)
	require.Equal(t, "14:00 to 14:06 UTC. p50: from 10 ms to 40 ms. p95: no data", svg.children[1].text)
	require.Equal(t, []string{"p50", "p95"}, texts(svg.group(t, "legend").all("text")))
}

// A bucket missing from the points breaks a line as a nil value does, when
// the chart says how far apart buckets are.
func TestLinesBreakWhereABucketHasNoPoint(t *testing.T) {
	t.Parallel()
	points := []Point{{T: t0, V: v(50)}, {T: t0.Add(time.Minute), V: v(60)}, {T: t0.Add(3 * time.Minute), V: v(70)},
		{T: t0.Add(4 * time.Minute), V: v(80)}}
	c := Chart{Title: "Success rate", Start: t0, End: t0.Add(5 * time.Minute), Step: time.Minute, Unit: Percent,
		Series: []Series{{Name: "success", Points: points}}}
	svg := parse(t, Lines(c))
	var runs []string
	for _, l := range svg.all("polyline") {
		runs = append(runs, l.attr["points"])
	}
	require.Equal(t, []string{"92,82 176,70.4", "344,58.8 428,47.2"}, runs)

	// Without a step the points are the buckets: nothing is missing.
	c.Step = 0
	require.Len(t, parse(t, Lines(c)).all("polyline"), 1)
}

// Without a value, a chart says so instead of drawing an empty axis.
func TestEmptyChartsSaySo(t *testing.T) {
	t.Parallel()
	zeros := Series{Name: "succeeded", Points: minutes(0, 0, 0)}
	nils := Series{Name: "p50", Points: minutes(gap, gap)}
	outside := Series{Name: "p50", Points: []Point{{T: t0.Add(-time.Minute), V: v(5)}, {T: t0.Add(time.Hour), V: v(5)}}}
	for name, h := range map[string]template.HTML{
		"bars of zeros":           Bars(hour(Count, zeros)),
		"bars of nils":            Bars(hour(Count, nils)),
		"bars without series":     Bars(hour(Count)),
		"lines of nils":           Lines(hour(Millis, nils)),
		"lines without series":    Lines(hour(Percent)),
		"lines without points":    Lines(hour(Percent, Series{Name: "rate"})),
		"values outside":          Lines(hour(Millis, outside)),
		"a window that is none":   Lines(Chart{Start: t0, End: t0, Series: []Series{{Name: "x", Points: minutes(1)}}}),
		"a window the wrong way":  Bars(Chart{Start: t0, End: t0.Add(-time.Hour), Series: []Series{zeros}}),
		"NaN and infinities only": Lines(hour(Millis, Series{Name: "p50", Points: []Point{{T: t0, V: v(math.Inf(1))}}})),
	} {
		svg := parse(t, h)
		require.Empty(t, svg.all("rect"), name)
		require.Empty(t, svg.all("polyline"), name)
		require.Empty(t, svg.all("circle"), name)
		require.False(t, svg.hasGroup("legend"), name)
		var empty []string
		for _, n := range svg.all("text") {
			if n.attr["class"] == "empty" {
				empty = append(empty, n.text)
			}
		}
		require.Equal(t, []string{NoData}, empty, name)
		require.True(t, strings.HasSuffix(svg.children[1].text, ". "+NoData), name)
	}

	c := hour(Count, zeros)
	c.Empty = "Nothing sent yet"
	svg := parse(t, Bars(c))
	require.Contains(t, texts(svg.all("text")), "Nothing sent yet")
	require.Equal(t, []string{"14:00", "14:30", "15:00"}, texts(svg.group(t, "times").all("text")),
		"the window is still named")
}

func TestASinglePoint(t *testing.T) {
	t.Parallel()
	one := Series{Name: "p50", Points: []Point{{T: t0.Add(30 * time.Minute), V: v(12)}}}
	svg := parse(t, Lines(hour(Millis, one)))
	require.Empty(t, svg.all("polyline"))
	dots := svg.all("circle")
	require.Len(t, dots, 1)
	require.Equal(t, "263.5", dots[0].attr["cx"], "the middle of the bucket 14:30-14:31")
	require.Equal(t, []string{"0 ms", "5 ms", "10 ms", "15 ms"}, texts(svg.group(t, "axis").all("text")))
	require.Len(t, svg.group(t, "bands").all("rect"), 1)

	bars := parse(t, Bars(hour(Count, Series{Name: "n", Points: []Point{{T: t0, V: v(1)}}})))
	rects := bars.group(t, "marks").all("rect")
	require.Len(t, rects, 1)
	require.Equal(t, "50.5", rects[0].attr["x"])
	require.Equal(t, "6", rects[0].attr["width"])
	require.Equal(t, "24", rects[0].attr["y"], "the only value reaches the top of its axis")

	// Without a step the only point's bucket is the whole window.
	c := hour(Count, Series{Name: "n", Points: []Point{{T: t0, V: v(1)}}})
	c.Step = 0
	require.Equal(t, "419", parse(t, Bars(c)).group(t, "marks").all("rect")[0].attr["width"])
}

// Values near the largest float64 and beyond the axis's reach stay inside
// the chart as finite numbers; parse checks every coordinate.
func TestHugeValues(t *testing.T) {
	t.Parallel()
	for _, unit := range []Unit{Count, Millis, Percent} {
		for _, values := range [][]float64{
			{math.MaxFloat64, math.MaxFloat64},
			{1e300, 1, gap, 1e-300},
			{4e15, 3e15},
			{1e9, 1},
		} {
			h := Lines(hour(unit, Series{Name: "a", Points: minutes(values...)}, Series{Name: "b", Points: minutes(values...)}))
			svg := parse(t, h)
			require.NotContains(t, strings.ToLower(string(h)), "nan")
			require.NotContains(t, strings.ToLower(string(h)), "inf")
			require.NotEmpty(t, svg.all("polyline"))
			parse(t, Bars(hour(unit, Series{Name: "a", Points: minutes(values...)}, Series{Name: "b", Points: minutes(values...)})))
		}
	}
	svg := parse(t, Bars(hour(Count, Series{Name: "n", Points: minutes(2.5e6, 1e6)})))
	require.Equal(t, []string{"0", "1M", "2M", "3M"}, texts(svg.group(t, "axis").all("text")))
	require.Equal(t, "14:00–14:01: n 2500000", svg.group(t, "bands").all("title")[0].text)
}

// Nothing goes below zero: negative values are drawn as zero, the axis
// starts at zero, and a percentage beyond 100 is drawn at 100.
func TestAxesStartAtZero(t *testing.T) {
	t.Parallel()
	svg := parse(t, Lines(hour(Millis, Series{Name: "p50", Points: minutes(-5, -1, 3)})))
	require.Equal(t, "0 ms", svg.group(t, "axis").all("text")[0].text)
	require.Equal(t, "53.5,140 60.5,140 67.5,24", svg.all("polyline")[0].attr["points"])

	svg = parse(t, Lines(hour(Percent, Series{Name: "rate", Points: minutes(150, 50, -10)})))
	require.Equal(t, []string{"0%", "25%", "50%", "75%", "100%"}, texts(svg.group(t, "axis").all("text")))
	require.Equal(t, "53.5,24 60.5,82 67.5,140", svg.all("polyline")[0].attr["points"])

	svg = parse(t, Bars(hour(Count, Series{Name: "n", Points: minutes(-3, 2)})))
	require.Len(t, svg.group(t, "marks").all("rect"), 1, "a negative count is no bar")
	require.Equal(t, []string{"0", "1", "2"}, texts(svg.group(t, "axis").all("text")))
	require.Equal(t, "n: 2 in all, at most 2 in a bucket", strings.Split(svg.children[1].text, ". ")[1])
}

// Whatever the texts hold, the chart stays well-formed and shows them as
// they were, less what XML cannot carry.
func TestTextIsEscaped(t *testing.T) {
	t.Parallel()
	name := `<b>"x"</b> & 'q' ]]> <!--`
	c := hour(Count, Series{Name: name, Class: `ok" onload="alert(1)" x<y good-one`, Color: `red"/><script>`,
		Points: minutes(1)}, Series{Name: "bad\x00byte\xff\x1b", Points: minutes(2)})
	c.Title = `Deliveries "now" <script>&amp;</script>`
	c.Empty = "<none>"
	h := Bars(c)
	require.NotContains(t, string(h), "<script")
	require.NotContains(t, string(h), "<b>")
	svg := parse(t, h)
	require.Equal(t, c.Title, svg.attr["aria-label"])
	require.Equal(t, c.Title, svg.children[0].text)
	require.Equal(t, []string{name, "badbyte\uFFFD"}, texts(svg.group(t, "legend").all("text")))
	rect := svg.group(t, "marks").all("rect")[0]
	require.Equal(t, "series-0 good-one", rect.attr["class"], "only plain class names")
	require.Equal(t, `red"/><script>`, rect.attr["fill"], "an attribute, not markup")
	require.Contains(t, svg.group(t, "bands").all("title")[0].text, name+" 1")

	c.Series = nil
	require.Contains(t, texts(parse(t, Bars(c)).all("text")), "<none>")
}

func TestLongNamesAreShortenedInTheLegendOnly(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 40)
	svg := parse(t, Lines(hour(Count, Series{Name: long, Points: minutes(1, 2)})))
	require.Equal(t, []string{strings.Repeat("é", 27) + "…"}, texts(svg.group(t, "legend").all("text")))
	require.Contains(t, svg.children[1].text, long)
}

func TestTimeLabels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		window time.Duration
		loc    *time.Location
		want   []string
	}{
		{time.Hour, nil, []string{"14:00", "14:30", "15:00"}},
		{time.Hour, time.FixedZone("CEST", 2*3600), []string{"16:00", "16:30", "17:00"}},
		{6 * time.Hour, nil, []string{"14:00", "17:00", "20:00"}},
		{24 * time.Hour, nil, []string{"Mon 14:00", "Tue 02:00", "Tue 14:00"}},
		{7 * 24 * time.Hour, nil, []string{"Mon 14:00", "Fri 02:00", "Mon 14:00"}},
	} {
		c := Chart{Title: "x", Start: t0, End: t0.Add(tc.window), Location: tc.loc,
			Series: []Series{{Name: "n", Points: []Point{{T: t0, V: v(1)}}}}}
		svg := parse(t, Bars(c))
		times := svg.group(t, "times").all("text")
		require.Equal(t, tc.want, texts(times), "%s", tc.window)
		require.Equal(t, []string{"start", "middle", "end"},
			[]string{times[0].attr["text-anchor"], times[1].attr["text-anchor"], times[2].attr["text-anchor"]})
		require.Equal(t, []string{"50", "260", "470"}, []string{times[0].attr["x"], times[1].attr["x"], times[2].attr["x"]})
	}
	c := hour(Count, Series{Name: "n", Points: minutes(1)})
	c.Location = time.FixedZone("CEST", 2*3600)
	svg := parse(t, Bars(c))
	require.True(t, strings.HasPrefix(svg.children[1].text, "16:00 to 17:00 CEST. "), svg.children[1].text)
	require.Equal(t, "16:00–16:01: n 1", svg.group(t, "bands").all("title")[0].text)
}

// The same data draws the same chart, whatever the order of its points.
func TestOutputIsDeterministic(t *testing.T) {
	t.Parallel()
	forward := minutes(1, 2, gap, 4, 5)
	backward := make([]Point, len(forward))
	for i, p := range forward {
		backward[len(forward)-1-i] = p
	}
	a := hour(Millis, Series{Name: "p50", Points: forward}, Series{Name: "p95", Points: minutes(9, 8, 7)})
	b := hour(Millis, Series{Name: "p50", Points: backward}, Series{Name: "p95", Points: minutes(9, 8, 7)})
	require.Equal(t, Lines(a), Lines(b))
	require.Equal(t, Bars(a), Bars(b))
	for range 20 {
		require.Equal(t, Lines(a), Lines(a))
	}
}

// Points outside the window are left out; two points of a series in one
// bucket add up.
func TestPointsAreBucketed(t *testing.T) {
	t.Parallel()
	points := []Point{{T: t0.Add(-time.Second), V: v(100)}, {T: t0, V: v(1)}, {T: t0, V: v(2)},
		{T: t0.Add(time.Hour), V: v(100)}}
	svg := parse(t, Bars(hour(Count, Series{Name: "n", Points: points})))
	require.Equal(t, []string{"14:00–14:01: n 3"}, texts(svg.group(t, "bands").all("title")))
	require.Equal(t, []string{"0", "1", "2", "3"}, texts(svg.group(t, "axis").all("text")))
}

func TestSize(t *testing.T) {
	t.Parallel()
	c := hour(Count, Series{Name: "n", Points: minutes(1)})
	c.Width, c.Height = 300, 120
	svg := parse(t, Bars(c))
	require.Equal(t, []string{"300", "120", "0 0 300 120"}, []string{svg.attr["width"], svg.attr["height"], svg.attr["viewBox"]})
	c.Width, c.Height, c.Title = 10, -4, ""
	svg = parse(t, Bars(c))
	require.Equal(t, []string{"200", "100"}, []string{svg.attr["width"], svg.attr["height"]})
	require.Equal(t, "Chart", svg.attr["aria-label"], "an untitled chart still has a name")
}

func TestSeriesBeyondThePaletteTakeItsColoursAgain(t *testing.T) {
	t.Parallel()
	var series []Series
	for i := range len(palette) + 1 {
		series = append(series, Series{Name: strconv.Itoa(i), Points: minutes(1)})
	}
	rects := parse(t, Bars(hour(Count, series...))).group(t, "marks").all("rect")
	require.Len(t, rects, len(palette)+1)
	require.Equal(t, rects[0].attr["fill"], rects[len(palette)].attr["fill"])
	require.NotEqual(t, rects[0].attr["fill"], rects[1].attr["fill"])
}

func TestEsc(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":               "plain",
		`<a href="x">&'</a>`:  "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;",
		"tab\tline\nreturn\r": "tab\tline\nreturn\r",
		"nul\x00bell\x07":     "nulbell",
		"bad\xffutf8":         "bad\uFFFDutf8",
		"\uFFFE\uFFFFok":      "ok",
		"ünïcödé 🚀":           "ünïcödé 🚀",
	} {
		require.Equal(t, want, esc(in), "%q", in)
	}
	require.Equal(t, "a b-c d_e", classes(" a  b-c d_e f.g h:i j\"k <l> "))
	require.Empty(t, classes(`" onload="x`))
}
