-- Terminal states stay final, checked after the row is written instead of
-- before. A BEFORE ROW UPDATE trigger makes Postgres lock every row an
-- UPDATE of deliveries touches before calling it, whatever its columns or
-- condition: one more WAL record and tuple lock for each attempt recorded.
-- An AFTER trigger's WHEN condition is evaluated as the row is written, and
-- the trigger runs only for a move out of a terminal state, whose error
-- undoes the statement as before.
DROP TRIGGER deliveries_keep_terminal ON deliveries;
CREATE OR REPLACE FUNCTION deliveries_keep_terminal() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'delivery % is % and cannot become %', OLD.id, OLD.status, NEW.status
        USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER deliveries_keep_terminal AFTER UPDATE OF status ON deliveries
    FOR EACH ROW
    WHEN (OLD.status IN ('succeeded', 'exhausted', 'cancelled') AND NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION deliveries_keep_terminal();
