package history

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPeriodsReadWholeHoursFromHourlyRows(t *testing.T) {
	t.Parallel()
	at := func(h, m int) time.Time { return time.Date(2026, 11, 20, h, m, 0, 0, time.UTC) }
	for name, tc := range map[string]struct {
		start, end, h1, h2 time.Time
	}{
		"a day from a minute":        {at(10, 21), at(10, 21).Add(24 * time.Hour), at(11, 0), at(10, 0).Add(24 * time.Hour)},
		"a day from an hour":         {at(10, 0), at(10, 0).Add(24 * time.Hour), at(10, 0), at(10, 0).Add(24 * time.Hour)},
		"an hour from a minute":      {at(10, 21), at(11, 21), at(11, 21), at(11, 21)},
		"an hour from an hour":       {at(10, 0), at(11, 0), at(10, 0), at(11, 0)},
		"two hours across one whole": {at(9, 30), at(11, 30), at(10, 0), at(11, 0)},
		"minutes within an hour":     {at(10, 5), at(10, 9), at(10, 9), at(10, 9)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := periodOf(tc.start, tc.end)
			require.Equal(t, period{start: tc.start, h1: tc.h1, h2: tc.h2, end: tc.end}, p)
		})
	}
	w := windowOf(at(10, 20).Add(13*time.Second), time.Hour)
	require.Equal(t, at(9, 21), w.start, "the window is the current minute and the 59 before")
	require.Equal(t, at(10, 21), w.end)
}

// A window that ends now reads its last hour's hourly row instead of that
// hour's minutes; one without a whole hour inside stays as it is.
func TestPeriodsThroughNowReadTheLastHourWhole(t *testing.T) {
	t.Parallel()
	at := func(h, m int) time.Time { return time.Date(2026, 11, 20, h, m, 0, 0, time.UTC) }
	day := windowOf(at(10, 54).Add(13*time.Second), 24*time.Hour)
	require.Equal(t, period{start: at(10, 55).Add(-24 * time.Hour), h1: at(11, 0).Add(-24 * time.Hour), h2: at(10, 0), end: at(10, 55)}, day)
	require.Equal(t, period{start: day.start, h1: day.h1, h2: at(11, 0), end: at(11, 0)}, day.throughNow())
	onHour := windowOf(at(10, 59).Add(13*time.Second), 24*time.Hour)
	require.Equal(t, onHour, onHour.throughNow(), "no minute of the hour to replace")
	minutes := windowOf(at(10, 20), 10*time.Minute)
	require.Equal(t, minutes, minutes.throughNow())
}
