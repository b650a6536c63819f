DROP TRIGGER deliveries_batch_outcomes ON deliveries;
DROP FUNCTION deliveries_batch_outcomes();
DROP TABLE batch_outcomes;
