DROP TABLE retention_kept;
DROP TABLE retention_floors;
