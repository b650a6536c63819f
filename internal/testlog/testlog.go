// Package testlog captures what a test's background goroutines write, a
// logger's lines or a child process's output, so that the test can read
// it while they are still writing.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that is safe for concurrent use: writers
// append, String returns what was written so far. The zero value is ready
// to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
