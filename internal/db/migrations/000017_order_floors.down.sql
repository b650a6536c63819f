DROP TABLE order_floors;
