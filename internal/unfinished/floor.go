// Package unfinished keeps each webhook's unfinished floor: an id at or
// before its oldest unfinished (pending or retrying) delivery, stored in
// webhook_unfinished_floors.
//
// The partial indexes that hold a webhook's unfinished deliveries
// (deliveries_unfinished_idx, and deliveries_circuit_parked_idx for those
// parked behind its circuit) keep an entry for every delivery that passed
// through them until a vacuum: readers skip such an entry but still read
// its page. A statement that reads them from the webhook's first entry
// reads pages in proportion to its history; one that reads from the floor
// reads the entries since its oldest unfinished delivery.
//
// The floor only moves forward, to the webhook's oldest unfinished
// delivery, and never past FloorLag before now. Every delivery's id is
// taken by uuidv7() in the statement that inserts it, from Postgres's
// clock, and the transaction commits right after that statement: a
// delivery not yet visible to the statement that moves the floor has an
// id from the last moments, which the lag keeps ahead of the floor. A
// terminal state is final and every new delivery (a retry, a recovery, a
// replay) takes a new id, so a delivery behind the floor never becomes
// unfinished again.
//
// An old unfinished delivery holds the floor; the webhook's span, kept in
// the same row, is a head past such deliveries and their ids (see
// AdvanceFloor), for the readers that would otherwise read every entry
// since it.
package unfinished

import (
	"fmt"
	"time"

	"github.com/hookline/hookline/internal/wire"
)

// FloorLag is how far before now the floor stops at the latest.
const FloorLag = 5 * time.Minute

// BehindCap is how many old unfinished deliveries a webhook's span keeps
// by id, behind its head.
const BehindCap = 100

// HeadStep is how far the span's head must have fallen behind FloorLag
// before now for a call to store the head it moved: the row is written at
// most about once per HeadStep for the head's sake, not at every call (a
// call that stores nothing still returns the span it found, which holds).
const HeadStep = time.Minute

// AdvanceFloor returns the WITH items of a statement that moves the floor
// and the span of the webhook whose id is the SQL expression webhook, of
// the tenant whose id is the expression tenant, and names them.
//
// The statement reads `(SELECT floor FROM next)`, at or before every
// unfinished delivery of the webhook. The floor is moved to the webhook's
// oldest unfinished delivery found from the stored floor (from the
// webhook's first entry when it has none), or to FloorLag before now if
// that is earlier or the webhook has none. A concurrent advance may have
// moved the floor further since: the upsert keeps the greater, and the one
// named here is at or before both.
//
// It also reads `span (head, behind)`: every unfinished delivery of the
// webhook has an id at or after head, or in behind. One old unfinished
// delivery (retrying for a day, parked while its webhook is paused) holds
// the floor, and a statement reading from the floor reads every entry
// since it; one reading the deliveries of behind by id and the range from
// head does not. Behind holds the webhook's unfinished deliveries older
// than FloorLag, up to BehindCap of them, the oldest first; head is
// FloorLag before now, or the next unfinished delivery when there are
// more. To find them the statement reads the stored behind by id and the
// entries from the stored head on: at each call, those since the last.
// The upsert keeps the later head, with its behind: each pair holds
// alone, since no delivery behind a head becomes unfinished again. It
// stores a head only when the stored one is more than HeadStep older
// than FloorLag before now, or is past fewer than BehindCap deliveries.
//
// The statement writes only when the row it read needs to move, as the
// upsert's condition does for the row it finds: an upsert whose condition
// is false still locks the row, which gives a read a transaction id and
// its commit a WAL flush, and two readers of one webhook a wait.
//
// Nothing moves unless the webhook is the tenant's.
func AdvanceFloor(webhook, tenant string) string {
	return fmt.Sprintf(`cur AS (
    SELECT coalesce(f.floor, '00000000-0000-0000-0000-000000000000') AS floor,
        greatest(f.head, f.floor, '00000000-0000-0000-0000-000000000000') AS head, coalesce(f.behind, '{}') AS behind,
        f.webhook_id IS NOT NULL AS stored, f.head AS stored_head
    FROM (SELECT 1) one LEFT JOIN webhook_unfinished_floors f ON f.webhook_id = %[1]s
), first AS (
    SELECT d.id FROM deliveries d
    WHERE d.webhook_id = %[1]s AND d.tenant_id = %[2]s AND d.status IN ('pending', 'retrying')
      AND d.id >= (SELECT floor FROM cur)
    ORDER BY d.id
    LIMIT 1
), next AS (
    SELECT greatest((SELECT floor FROM cur),
        least((SELECT id FROM first), uuidv7_floor(now() - interval '%[3]d milliseconds'))) AS floor
), still AS (
    SELECT d.id FROM deliveries d
    WHERE d.id = ANY ((SELECT behind FROM cur)::uuid[]) AND d.webhook_id = %[1]s AND %[5]s
), ahead AS (
    SELECT d.id FROM deliveries d
    WHERE d.webhook_id = %[1]s AND d.tenant_id = %[2]s AND d.status IN ('pending', 'retrying')
      AND d.id >= (SELECT head FROM cur) AND d.id < uuidv7_floor(now() - interval '%[3]d milliseconds')
    ORDER BY d.id
    LIMIT %[4]d + 1
), old AS (
    SELECT id, row_number() OVER (ORDER BY id) AS n FROM (SELECT id FROM still UNION ALL SELECT id FROM ahead) o
), split AS (
    SELECT coalesce((SELECT id FROM old WHERE n = %[4]d + 1),
            greatest((SELECT head FROM cur), uuidv7_floor(now() - interval '%[3]d milliseconds'))) AS head,
        coalesce((SELECT array_agg(id ORDER BY id) FROM old WHERE n <= %[4]d), '{}') AS behind
), span AS (
    SELECT greatest(s.head, n.floor) AS head, s.behind FROM split s, next n
), moved AS (
    INSERT INTO webhook_unfinished_floors AS f (webhook_id, floor, head, behind)
    SELECT w.id, n.floor, s.head, s.behind FROM webhooks w, next n, split s, cur c WHERE w.id = %[1]s AND w.tenant_id = %[2]s
      AND (NOT c.stored OR c.floor < n.floor OR c.stored_head IS NULL
           OR c.stored_head < least(s.head, uuidv7_floor(now() - interval '%[3]d milliseconds' - interval '%[6]d milliseconds')))
    ON CONFLICT (webhook_id) DO UPDATE SET floor = greatest(f.floor, excluded.floor),
        head = CASE WHEN f.head IS NULL OR f.head < excluded.head THEN excluded.head ELSE f.head END,
        behind = CASE WHEN f.head IS NULL OR f.head < excluded.head THEN excluded.behind ELSE f.behind END
    WHERE f.floor < excluded.floor OR f.head IS NULL
       OR f.head < least(excluded.head, uuidv7_floor(now() - interval '%[3]d milliseconds' - interval '%[6]d milliseconds'))
)`, webhook, tenant, FloorLag.Milliseconds(), BehindCap, wire.UnfinishedByKey("d.status"), HeadStep.Milliseconds())
}

// AdvanceFloors returns the WITH items of a statement that moves the floor
// of every webhook whose stored floor is before the SQL expression before
// (an id), as AdvanceFloor moves one, and names them: the statement reads
// `floors (webhook_id, floor)`, a row per such webhook at or before each
// of its unfinished deliveries. Every unfinished delivery of a webhook left
// out has an id at or after before. Deleted webhooks are included: a
// publish that read the webhook before its deletion may commit a delivery
// after the deletion cancelled the others.
//
// It costs a lookup per webhook it moves, from the stored floor to the
// webhook's oldest unfinished delivery, for statements that look for
// unfinished deliveries older than some time (the dlq's sweep of lost
// deliveries) without reading the entries the finished ones left in the
// partial indexes. A webhook whose floor it moved to FloorLag before now
// is left out again until that is before before. It writes only the
// floors that move, in webhook order, so that two such statements never
// deadlock and a webhook whose floor stays is not locked.
func AdvanceFloors(before string) string {
	return fmt.Sprintf(`cur AS (
    SELECT w.id AS webhook_id, coalesce(f.floor, '00000000-0000-0000-0000-000000000000') AS floor
    FROM webhooks w LEFT JOIN webhook_unfinished_floors f ON f.webhook_id = w.id
    WHERE coalesce(f.floor, '00000000-0000-0000-0000-000000000000') < (SELECT %[2]s)
), floors AS (
    SELECT c.webhook_id, greatest(c.floor, least(
        (SELECT d.id FROM deliveries d
         WHERE d.webhook_id = c.webhook_id AND d.status IN ('pending', 'retrying') AND d.id >= c.floor
         ORDER BY d.id LIMIT 1),
        uuidv7_floor(now() - interval '%[1]d milliseconds'))) AS floor
    FROM cur c
), moved AS (
    INSERT INTO webhook_unfinished_floors AS f (webhook_id, floor)
    SELECT n.webhook_id, n.floor FROM floors n JOIN cur c USING (webhook_id)
    WHERE n.floor > c.floor
    ORDER BY n.webhook_id
    ON CONFLICT (webhook_id) DO UPDATE SET floor = excluded.floor WHERE f.floor < excluded.floor
)`, FloorLag.Milliseconds(), before)
}
