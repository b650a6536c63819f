-- The W3C trace context of an event's publish (its traceparent and
-- tracestate headers), stored once per event, so that every attempt of
-- every delivery continues the producer's trace (docs/TRACING.md). NULL
-- when tracing was off at publish. The api bounds their lengths (a CHECK
-- here would fail the whole group commit the event shares).
ALTER TABLE events ADD COLUMN traceparent text, ADD COLUMN tracestate text;

-- Whether deliveries to the webhook carry traceparent and tracestate, so
-- that the endpoint's own tracing continues the trace.
ALTER TABLE webhooks ADD COLUMN trace_propagation boolean NOT NULL DEFAULT true;
