DROP TABLE IF EXISTS audit_log, delivery_attempts_retained, batch_operations, circuit_breaker_states, delivery_attempts, deliveries, events, webhooks, api_keys, tenants CASCADE;
DROP FUNCTION IF EXISTS ensure_attempt_partitions(integer);
DROP FUNCTION IF EXISTS deliveries_keep_terminal();
DROP FUNCTION IF EXISTS uuidv7();
