DROP INDEX IF EXISTS deliveries_dead_letter_order_idx;
