-- A webhook's deliveries of an event type are looked up event by event,
-- in the weeks of deliveries from the event's on (see history's list).
-- Nearly all of an event's deliveries are made with it; the others, a
-- retry of a dead letter (retry_of) or a recovery's (batch_operation_id),
-- may be made any time later. events.late_deliveries_until is when the
-- latest of those was made, or a moment after, NULL when it has none: the
-- lookup reads the weeks from the event's to a day past that, or past the
-- event's own creation, instead of every week since.
--
-- The trigger keeps it, whatever process or release inserts the delivery.
-- It writes the event at most once in 12 hours: the lookup's day of margin
-- covers what came since.
ALTER TABLE events ADD COLUMN late_deliveries_until timestamptz;

CREATE FUNCTION deliveries_mark_late() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    UPDATE events SET late_deliveries_until = clock_timestamp()
    WHERE id = NEW.event_id
      AND (late_deliveries_until IS NULL OR late_deliveries_until < clock_timestamp() - interval '12 hours');
    RETURN NULL;
END $$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION deliveries_mark_late() SET search_path = %I, pg_temp', current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION deliveries_mark_late() FROM PUBLIC;

-- Not for the rows retention moves between partitions, whose events are
-- marked already (hookline.rollups = process, as for the rollups).
CREATE TRIGGER deliveries_mark_late AFTER INSERT ON deliveries
    FOR EACH ROW
    WHEN ((NEW.retry_of IS NOT NULL OR NEW.batch_operation_id IS NOT NULL)
          AND current_setting('hookline.rollups', true) IS DISTINCT FROM 'process')
    EXECUTE FUNCTION deliveries_mark_late();

-- The deliveries made so far after their event.
UPDATE events e SET late_deliveries_until = now()
FROM (SELECT DISTINCT event_id FROM deliveries WHERE retry_of IS NOT NULL
      UNION SELECT DISTINCT event_id FROM deliveries WHERE batch_operation_id IS NOT NULL) l
WHERE e.id = l.event_id;
