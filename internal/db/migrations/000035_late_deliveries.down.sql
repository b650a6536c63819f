DROP TRIGGER deliveries_mark_late ON deliveries;
DROP FUNCTION deliveries_mark_late();
ALTER TABLE events DROP COLUMN late_deliveries_until;
