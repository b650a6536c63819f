package webhook

import (
	"bytes"
	"fmt"

	"github.com/google/uuid"
)

// OrderKey is the key under which a delivery of eventType to webhook id
// waits for the ones before it: the webhook for strict ordering, the
// webhook and the event type for per_event_type, none ("") otherwise.
func OrderKey(ordering, id, eventType string) string {
	switch ordering {
	case OrderingStrict:
		return id
	case OrderingPerEventType:
		return id + "/" + eventType
	}
	return ""
}

// OrderKeySQL is OrderKey in SQL, for the webhook row alias w and the event
// type expression eventType.
func OrderKeySQL(w, eventType string) string {
	return fmt.Sprintf(`CASE %[1]s.ordering_guarantee WHEN '%[3]s' THEN %[1]s.id::text WHEN '%[4]s' THEN %[1]s.id::text || '/' || %[2]s END`,
		w, eventType, OrderingStrict, OrderingPerEventType)
}

// LowerOrderFloorsSQL keeps the floors of order keys (order_floors, see
// package delivery) at or below the deliveries of older events that a
// retry or a recovery gave them: $1 the keys, $2 and $3 each key's lowest
// new (event_id, id). A key without a floor gets one that bounds nothing,
// so that a release which read it without one, and would raise it above
// these deliveries, finds it changed and leaves it. Rows are taken in key
// order, so that two of these statements never deadlock. A key's new
// floor is looked up in one object of them all, made once: a lookup by
// scanning the keys at every conflict made a chunk of 1,000 keys cost
// 1,000 x 1,000 comparisons.
const LowerOrderFloorsSQL = `WITH low AS (
    SELECT * FROM unnest($1::text[], $2::uuid[], $3::uuid[]) AS t(order_key, event_id, id)
), by_key AS (
    SELECT jsonb_object_agg(order_key, jsonb_build_array(event_id, id)) AS floors FROM low
)
INSERT INTO order_floors AS f (order_key, event_id, id)
SELECT order_key, '00000000-0000-0000-0000-000000000000', '00000000-0000-0000-0000-000000000000' FROM low
ORDER BY order_key
ON CONFLICT (order_key) DO UPDATE
SET event_id = ((SELECT floors FROM by_key) -> excluded.order_key ->> 0)::uuid,
    id = ((SELECT floors FROM by_key) -> excluded.order_key ->> 1)::uuid
WHERE (((SELECT floors FROM by_key) -> excluded.order_key ->> 0)::uuid,
       ((SELECT floors FROM by_key) -> excluded.order_key ->> 1)::uuid) < (f.event_id, f.id)`

// OrderFloors gives the lowest (event id, id) of each order key among new
// deliveries, as LowerOrderFloorsSQL takes them; deliveries without a key
// are left out.
func OrderFloors(keys []string, eventIDs, ids []uuid.UUID) (k []string, e, i []uuid.UUID) {
	low := map[string]int{}
	for n, key := range keys {
		if key == "" {
			continue
		}
		at, ok := low[key]
		if !ok {
			low[key] = len(k)
			k, e, i = append(k, key), append(e, eventIDs[n]), append(i, ids[n])
			continue
		}
		if c := bytes.Compare(eventIDs[n][:], e[at][:]); c < 0 || c == 0 && bytes.Compare(ids[n][:], i[at][:]) < 0 {
			e[at], i[at] = eventIDs[n], ids[n]
		}
	}
	return k, e, i
}
