-- Retention reads each old row once.
--
-- Its deletion of old deliveries and its clearing of old payloads paged
-- from the first id at every run: through the index entries of every
-- delivery it had deleted and every payload it had cleared (they stay
-- until a vacuum), and every row it keeps (unresolved dead letters, say).
-- retention_floors holds, for each of the two, the id below which every
-- row was handled: deleted, cleared, or listed in retention_kept, which a
-- run looks at again by id once a day (revisited_at), since the listed
-- rows change rarely (internal/retention).
CREATE TABLE retention_floors (
    step         text PRIMARY KEY CHECK (step IN ('deliveries', 'payloads')),
    floor        uuid NOT NULL,
    revisited_at timestamptz
);

CREATE TABLE retention_kept (
    step text NOT NULL CHECK (step IN ('deliveries', 'payloads')),
    id   uuid NOT NULL,
    PRIMARY KEY (step, id)
);

GRANT SELECT, INSERT, UPDATE ON retention_floors TO hookline_dlq;
GRANT SELECT, INSERT, DELETE ON retention_kept TO hookline_dlq;
