package report

import "syscall"

// FlushWrites writes every dirty page of the machine to disk before a
// measurement. The binaries that `go run` or a program's own `go build`
// has just written stay in the page cache until the kernel writes them
// back, 30 s later by Linux's default (vm.dirty_expire_centisecs): over
// 100 MB at once for hookline's three commands, which holds every fsync
// of Postgres and RabbitMQ behind it for a few hundred milliseconds, in
// the middle of whatever the program is measuring by then.
func FlushWrites() { syscall.Sync() }
