DROP TABLE IF EXISTS console_signing_keys;
