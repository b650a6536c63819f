DROP FUNCTION analyze_table(regclass);
