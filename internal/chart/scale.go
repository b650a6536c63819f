package chart

import (
	"math"
	"strconv"
	"strings"
)

// scale is a y axis from zero to top with a tick every step.
type scale struct {
	top, step float64
}

// targetTicks is how many steps an axis aims for above zero: enough to
// read a value, few enough for a chart 100 pixels high.
const targetTicks = 4

// niceScale is the axis for values up to max: the smallest step of 1, 2 or
// 5 times a power of ten that reaches max in targetTicks steps or fewer, and
// the first multiple of it at or above max. A count steps by whole numbers;
// a percentage is always 0 to 100 in quarters. The axis reaches one at
// least (a count, a millisecond: below that the data has no resolution),
// and so does it without a finite max.
func niceScale(max float64, unit Unit) scale {
	if unit == Percent {
		return scale{top: 100, step: 25}
	}
	if !(max >= 1) || math.IsInf(max, 0) {
		max = 1
	}
	step := niceStep(max / targetTicks)
	if unit == Count && step < 1 {
		step = 1
	}
	top := math.Ceil(max/step) * step
	if math.IsInf(top, 0) {
		// Near the largest float64 the next multiple overflows: the axis
		// ends at max, in even steps.
		return scale{top: max, step: max / targetTicks}
	}
	return scale{top: top, step: step}
}

// niceStep is the smallest of 1, 2, 5 and 10 times a power of ten that is
// at least rough.
func niceStep(rough float64) float64 {
	pow := math.Pow(10, math.Floor(math.Log10(rough)))
	for _, m := range []float64{1, 2, 5} {
		// The margin keeps a rough of exactly 2 (or 5) from rounding
		// past 2 in the division.
		if rough <= m*pow*(1+1e-9) {
			return m * pow
		}
	}
	return 10 * pow
}

// ticks are the values of the axis's ticks, zero first.
func (s scale) ticks() []float64 {
	n := int(math.Round(s.top / s.step))
	out := make([]float64, 0, n+1)
	for i := 0; i <= n; i++ {
		out = append(out, float64(i)*s.step)
	}
	return out
}

// tickLabel is v as the axis shows it: short, with a k, M, G or T for
// thousands and up and as many decimals as the step needs.
func (s scale) tickLabel(v float64, unit Unit) string {
	switch {
	case unit == Percent:
		return compact(v, s.step) + "%"
	case unit == Millis && s.top >= 1000:
		return compact(v/1000, s.step/1000) + " s"
	case unit == Millis:
		return compact(v, s.step) + " ms"
	}
	return compact(v, s.step)
}

// The prefixes of compact, largest first.
var prefixes = []struct {
	div    float64
	suffix string
}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}}

// compact writes v for an axis whose ticks are step apart: 1.5k, 20M;
// beyond the prefixes, in exponent form.
func compact(v, step float64) string {
	if math.Abs(v) >= 1e15 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	div, suffix := 1.0, ""
	for _, p := range prefixes {
		if math.Abs(v) >= p.div {
			div, suffix = p.div, p.suffix
			break
		}
	}
	return trimmed(v/div, decimalsFor(step/div)) + suffix
}

// decimalsFor is how many decimals tell steps of step apart: none for
// whole steps, one for tenths and so on, at most three.
func decimalsFor(step float64) int {
	d := 0
	for d < 3 && math.Abs(step-math.Round(step)) > 1e-9*math.Max(1, step) {
		step *= 10
		d++
	}
	return d
}

// trimmed is v with at most decimals decimals and no trailing zeros.
func trimmed(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// valueLabel is v as a tooltip or the summary shows it: exact where the
// axis rounds (1234, 97.5%, 12.5 ms, 1.25 s).
func valueLabel(v float64, unit Unit) string {
	var s string
	switch {
	case math.Abs(v) >= 1e15:
		s = strconv.FormatFloat(v, 'g', 3, 64)
	case unit == Millis && v >= 1000:
		return trimmed(v/1000, 2) + " s"
	default:
		s = trimmed(v, 1)
	}
	switch unit {
	case Percent:
		return s + "%"
	case Millis:
		return s + " ms"
	}
	return s
}
