DROP TRIGGER deliveries_keep_terminal ON deliveries;
CREATE OR REPLACE FUNCTION deliveries_keep_terminal() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status IN ('succeeded', 'exhausted', 'cancelled') AND NEW.status IS DISTINCT FROM OLD.status THEN
        RAISE EXCEPTION 'delivery % is % and cannot become %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER deliveries_keep_terminal BEFORE UPDATE OF status ON deliveries
    FOR EACH ROW EXECUTE FUNCTION deliveries_keep_terminal();
