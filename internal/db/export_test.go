package db

// AnalyzeStaleAfter is AnalyzeStale with the age of a last analysis after
// which a table changed by 10 % is analyzed again given by the test.
var AnalyzeStaleAfter = analyzeStale
