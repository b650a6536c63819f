package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPGPartsCountsEachProcessOnceAndTheRestAsUnattributed(t *testing.T) {
	a := pgSample{procs: map[int]pgProc{
		10: {part: "hookline-worker", ticks: 100},
		11: {part: "hookline-api", ticks: 40},
		12: {part: "checkpointer", ticks: 5},
		13: {part: "hookline-dlq", ticks: 9}, // ends before b
	}}
	b := pgSample{procs: map[int]pgProc{
		10: {part: "hookline-worker", ticks: 160},
		11: {part: "hookline-api", ticks: 70},
		12: {part: "checkpointer", ticks: 8},
		14: {part: "hookline-worker", ticks: 4},   // started meanwhile
		15: {part: "hookline-api", ticks: 0},      // started meanwhile, idle
		16: {part: "background writer", ticks: 2}, // not read before: all it used
	}}
	parts := pgParts(a, b, 1200*time.Millisecond)
	require.Equal(t, map[string]time.Duration{
		"hookline-worker":   640 * time.Millisecond,
		"hookline-api":      300 * time.Millisecond,
		"checkpointer":      30 * time.Millisecond,
		"background writer": 20 * time.Millisecond,
		pgUnattributed:      210 * time.Millisecond,
	}, parts)

	// A pid reused by another kind of process counts from zero, and the
	// unattributed part is never negative.
	c := pgSample{procs: map[int]pgProc{10: {part: "hookline-api", ticks: 3}}}
	require.Equal(t, map[string]time.Duration{"hookline-api": 30 * time.Millisecond, pgUnattributed: 0},
		pgParts(b, c, 10*time.Millisecond))
}

func TestStatementsBetweenAndTheTopOnes(t *testing.T) {
	a := pgSample{statements: map[int64]statementUse{
		1: {calls: 10, execMs: 5, blocks: 40, text: "SELECT 1"},
		2: {calls: 3, execMs: 9, blocks: 6, text: "UPDATE t"},
	}}
	b := pgSample{statements: map[int64]statementUse{
		1: {calls: 30, execMs: 9, blocks: 100, reads: 2, text: "SELECT 1"},
		2: {calls: 3, execMs: 9, blocks: 6, text: "UPDATE t"}, // not run meanwhile
		3: {calls: 1, execMs: 7, blocks: 3, text: "INSERT"},
	}}
	w1 := statementsBetween(a, b)
	require.Equal(t, map[int64]statementDelta{
		1: {id: 1, calls: 20, execMs: 4, blocks: 60, reads: 2, text: "SELECT 1"},
		3: {id: 3, calls: 1, execMs: 7, blocks: 3, text: "INSERT"},
	}, w1)
	w2 := map[int64]statementDelta{1: {id: 1, calls: 5, execMs: 4}, 4: {id: 4, calls: 1, execMs: 2}}
	require.Equal(t, []int64{1, 3, 4}, topStatements([]map[int64]statementDelta{w1, w2}, 5), "8, 7 and 2 ms")
	require.Equal(t, []int64{1, 3}, topStatements([]map[int64]statementDelta{w1, w2}, 2))
}

func TestStatementText(t *testing.T) {
	require.Equal(t, `SELECT a \|\| b FROM t`, statementText("SELECT a ||\n   b\tFROM t", 90))
	require.Equal(t, "SELECT...", statementText("SELECT x FROM t", 6))
}

func TestServerBetweenCountsTheWindowsCheckpointsAndWALPerDelivery(t *testing.T) {
	a := pgSample{server: pgServer{timed: 3, requested: 10, walBytes: 1000}}
	b := pgSample{server: pgServer{timed: 4, requested: 13, walBytes: 9000}}
	timed, requested, wal := serverBetween(a, b, 4)
	require.Equal(t, []any{int64(1), int64(3), 2000.0}, []any{timed, requested, wal})
	_, _, wal = serverBetween(a, b, 0)
	require.Zero(t, wal, "no delivery, no figure")
}
