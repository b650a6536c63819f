DROP FUNCTION IF EXISTS end_console_session(bytea, uuid, timestamptz);
DROP TABLE IF EXISTS console_sessions_ended;
