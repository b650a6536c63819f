package history

import (
	"time"

	"github.com/google/uuid"
)

// IDSlack widens the id bounds derived from a time bound: delivery ids are
// UUIDv7 taken at insert time, close to but not exactly created_at.
const IDSlack = time.Hour

// IDAt is the smallest UUIDv7 of the millisecond t: deliveries and events
// have time-ordered ids, so a time bound on created_at can also bound the
// primary key (with some slack for clocks).
func IDAt(t time.Time) uuid.UUID {
	var id uuid.UUID
	ms := uint64(t.UnixMilli())
	for i := 0; i < 6; i++ {
		id[i] = byte(ms >> (40 - 8*i)) //nolint:gosec // keeps the low 48 bits, one byte at a time
	}
	id[6] = 0x70
	id[8] = 0x80
	return id
}

// MaxID is the greatest uuid, an id bound that excludes nothing.
var MaxID = uuid.UUID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// IDBounds are the id bounds [lower, upper) of rows created in [from, to)
// (either nil for no bound), with IDSlack on each side.
func IDBounds(from, to *time.Time) (lower, upper uuid.UUID) {
	lower, upper = uuid.Nil, MaxID
	if from != nil {
		lower = IDAt(from.Add(-IDSlack))
	}
	if to != nil {
		upper = IDAt(to.Add(IDSlack))
	}
	return lower, upper
}
