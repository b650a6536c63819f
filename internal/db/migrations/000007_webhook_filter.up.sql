-- A webhook's payload filter: a CEL expression over the event's
-- event_type, source and data that must be true for the webhook to
-- receive it, besides its event types (package filter). Empty: no filter.
-- The api checks it at registration (4 KiB at most).
ALTER TABLE webhooks ADD COLUMN filter text NOT NULL DEFAULT ''
    CONSTRAINT webhooks_filter_length CHECK (octet_length(filter) <= 4096);

-- Fan-out checks, for every tenant it publishes for, that the filtered
-- webhooks it evaluated are those of the tenant now; few webhooks have one.
CREATE INDEX webhooks_filtered_idx ON webhooks (tenant_id) WHERE filter <> '' AND deleted_at IS NULL;

-- dlq: a batch retry skips the deliveries whose webhook's filter no longer
-- matches their event.
GRANT SELECT (filter) ON webhooks TO hookline_dlq;
