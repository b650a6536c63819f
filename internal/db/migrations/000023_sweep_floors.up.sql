-- The dlq's sweeps read from floors, not from the start of the history.
--
-- The sweep of exhausted deliveries whose dead letter was lost found them
-- by dead_lettered_at IS NULL, which no index covered: every minute it
-- read every exhausted delivery the table ever held (40,000 index entries
-- and their rows at 2,000,000 deliveries). deliveries_unrecorded_idx holds
-- them by completed_at, and dead_letter_sweep_floor a time at or before
-- every one not yet recorded, from which the sweep reads (internal/dlq).
CREATE INDEX deliveries_unrecorded_idx ON deliveries (completed_at)
    WHERE status = 'exhausted' AND dead_lettered_at IS NULL;

CREATE TABLE dead_letter_sweep_floor (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    floor timestamptz NOT NULL
);

GRANT SELECT, INSERT, UPDATE ON dead_letter_sweep_floor TO hookline_dlq;

-- The sweep of lost deliveries read deliveries_unfinished_idx whole, every
-- entry a finished delivery left there until a vacuum; it now reads each
-- webhook's from its unfinished floor, which it moves.
GRANT SELECT, INSERT, UPDATE ON webhook_unfinished_floors TO hookline_dlq;
