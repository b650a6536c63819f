package webhook

import "fmt"

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
