ALTER TABLE webhooks DROP COLUMN IF EXISTS trace_propagation;
ALTER TABLE events DROP COLUMN IF EXISTS tracestate, DROP COLUMN IF EXISTS traceparent;
