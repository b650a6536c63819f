-- No statement looks inside an event's payload, so the planner needs no
-- statistics about it; without them ANALYZE of events (which the worker
-- runs as the table grows, see internal/db/analyze.go) reads far less.
ALTER TABLE events ALTER COLUMN data SET STATISTICS 0;
