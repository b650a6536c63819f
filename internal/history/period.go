package history

import (
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// period is the rollup rows of [start, end), both on a minute: the hourly
// rows of its whole hours [h1, h2), and the minute rows of [start, h1) and
// [h2, end). Without a whole hour inside, h1 and h2 are end and every row
// is a minute's.
type period struct {
	start, h1, h2, end time.Time
}

// periodRows selects the rows of a period of the scope @scope from a
// rollup table; its other arguments come from period.args. Each of its
// three ranges names the whole primary key prefix (scope_id, hourly, at),
// so that each is one range of the index.
const periodRows = `((scope_id = @scope AND hourly = false AND at >= @start AND at < @h1)
    OR (scope_id = @scope AND hourly = true AND at >= @h1 AND at < @h2)
    OR (scope_id = @scope AND hourly = false AND at >= @h2 AND at < @end))`

// periodRowsOfAny is periodRows for every scope of @scopes (a uuid[]).
var periodRowsOfAny = strings.ReplaceAll(periodRows, "scope_id = @scope", "scope_id = ANY(@scopes::uuid[])")

// windowOf is the window of d ending with now's minute (included).
func windowOf(now time.Time, d time.Duration) period {
	end := now.UTC().Truncate(time.Minute).Add(time.Minute)
	return periodOf(end.Add(-d), end)
}

// periodOf is [start, end), both on a minute.
func periodOf(start, end time.Time) period {
	h1 := start.Truncate(time.Hour)
	if h1.Before(start) {
		h1 = h1.Add(time.Hour)
	}
	h2 := end.Truncate(time.Hour)
	if !h1.Before(h2) {
		h1, h2 = end, end
	}
	return period{start: start, h1: h1, h2: h2, end: end}
}

// throughNow is p, ending with the current minute, read with its last
// hour's hourly row instead of that hour's minute rows up to end: the same
// counts, since no row is later than now, in one row per shard instead of
// up to 60. A period without a whole hour inside is left as it is.
func (p period) throughNow() period {
	if !p.h2.Before(p.end) {
		return p
	}
	h := p.h2.Add(time.Hour)
	return period{start: p.start, h1: p.h1, h2: h, end: h}
}

// args adds the period's bounds to a and returns it.
func (p period) args(a pgx.NamedArgs) pgx.NamedArgs {
	a["start"], a["h1"], a["h2"], a["end"] = p.start, p.h1, p.h2, p.end
	return a
}
