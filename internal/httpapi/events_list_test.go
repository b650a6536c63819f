package httpapi

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/history"
)

// seedEventAt stores an event of the tenant created at, with an id of
// that time, as the publish path would have then.
func (e *apiEnv) seedEventAt(tenantID, eventType string, at time.Time) string {
	e.t.Helper()
	id := history.IDAt(at)
	_, err := rand.Read(id[8:])
	require.NoError(e.t, err)
	id[8] = id[8]&0x3f | 0x80
	_, err = e.pool.Exec(context.Background(), `INSERT INTO events (id, tenant_id, event_type, idempotency_key,
    request_hash, priority, data, created_at) VALUES ($1, $2, $3, $4, '\x00', 'normal', '{}', $5)`,
		id, tenantID, eventType, "seed-"+uuid.NewString(), at)
	require.NoError(e.t, err)
	return id.String()
}

// listIDs pages through GET /v1/events with query q, limit at a time, and
// returns the ids in the order listed.
func (e *apiEnv) listIDs(key string, q url.Values, limit string) []string {
	e.t.Helper()
	var ids []string
	q.Set("limit", limit)
	for page := 0; page < 100; page++ {
		r := e.do("GET", "/v1/events?"+q.Encode(), key, nil)
		require.Equal(e.t, http.StatusOK, r.Status, string(r.Raw))
		for _, item := range r.Body["data"].([]any) {
			ev := item.(map[string]any)
			require.NotContains(e.t, ev, "data", "a list leaves payloads out")
			ids = append(ids, ev["id"].(string))
		}
		next, _ := r.Body["next_cursor"].(string)
		if next == "" {
			return ids
		}
		q.Set("cursor", next)
	}
	e.t.Fatal("more than 100 pages")
	return nil
}

func TestListEventsNewestFirstByTypeAndTime(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	a, key := e.tenantKey("a")
	b, otherKey := e.tenantKey("b")
	now := time.Now().UTC()
	old := []string{
		e.seedEventAt(a, "order.created", now.Add(-48*time.Hour)),
		e.seedEventAt(a, "user.deleted", now.Add(-30*time.Hour)),
		e.seedEventAt(a, "order.created", now.Add(-2*time.Hour)),
	}
	e.seedEventAt(b, "order.created", now.Add(-30*time.Hour))
	var published []string
	for i, typ := range []string{"order.created", "user.deleted", "order.created", "order.paid", "user.deleted"} {
		r := e.publish(key, map[string]any{"event_type": typ, "data": map[string]any{"n": i}})
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		published = append(published, r.Body["id"].(string))
	}
	require.Equal(t, http.StatusAccepted, e.publish(otherKey, map[string]any{"event_type": "order.created", "data": map[string]any{}}).Status)

	newestFirst := []string{published[4], published[3], published[2], published[1], published[0], old[2], old[1], old[0]}
	require.Equal(t, newestFirst, e.listIDs(key, url.Values{}, "3"), "every event of the tenant, newest first, in pages")
	require.Equal(t, newestFirst, e.listIDs(key, url.Values{}, "500"))

	require.Equal(t, []string{published[4], published[1], old[1]},
		e.listIDs(key, url.Values{"event_type": {"user.deleted"}}, "2"))
	require.Equal(t, []string{old[1], old[0]},
		e.listIDs(key, url.Values{"from": {now.Add(-50 * time.Hour).Format(time.RFC3339)},
			"to": {now.Add(-24 * time.Hour).Format(time.RFC3339)}}, "1"))
	require.Equal(t, []string{published[2], published[0], old[2]},
		e.listIDs(key, url.Values{"event_type": {"order.created"}, "from": {now.Add(-3 * time.Hour).Format(time.RFC3339Nano)}}, "2"))
	require.Empty(t, e.listIDs(key, url.Values{"to": {now.Add(-72 * time.Hour).Format(time.RFC3339)}}, "10"))

	first := e.do("GET", "/v1/events?limit=1", key, nil)
	item := first.Body["data"].([]any)[0].(map[string]any)
	require.Equal(t, "user.deleted", item["event_type"])
	require.Equal(t, "normal", item["priority"])
	require.NotEmpty(t, item["idempotency_key"])
	require.NotEmpty(t, item["created_at"])

	for q, field := range map[string]string{
		"event_type=" + url.QueryEscape("bad type!"): "event_type",
		"from=yesterday": "from",
		"from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z": "to",
		"limit=0":             "limit",
		"limit=501":           "limit",
		"cursor=not-a-cursor": "cursor",
		"idempotency_key=k&event_type=order.created": "event_type",
	} {
		r := e.do("GET", "/v1/events?"+q, key, nil)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", q, r.Raw)
		require.Equal(t, field, r.errField(), q)
	}
	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/v1/events", "", nil).Status)
}
