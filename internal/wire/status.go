package wire

// Status is the state of a delivery (docs/DESIGN.md §16: pending, retrying, succeeded,
// exhausted; and cancelled, for a delivery whose webhook was deleted or
// whose payload was removed). The database's CHECK constraint and its
// trigger hold the same names and the same rule: a terminal status is
// final.
type Status string

// The statuses of a delivery.
const (
	// Pending: not attempted yet.
	Pending Status = "pending"
	// Retrying: attempted, failed, another attempt scheduled.
	Retrying Status = "retrying"
	// Succeeded: an attempt got a 2xx. Terminal.
	Succeeded Status = "succeeded"
	// Exhausted: out of attempts, or failed permanently; in the DLQ.
	// Terminal.
	Exhausted Status = "exhausted"
	// Cancelled: can no longer be made (webhook deleted, payload
	// removed). Terminal.
	Cancelled Status = "cancelled"
)

// Statuses lists every status, in the order a delivery goes through them.
var Statuses = []Status{Pending, Retrying, Succeeded, Exhausted, Cancelled}

// Terminal reports whether no code path may move a delivery out of s.
func (s Status) Terminal() bool {
	return s == Succeeded || s == Exhausted || s == Cancelled
}

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	switch s {
	case Pending, Retrying, Succeeded, Exhausted, Cancelled:
		return true
	}
	return false
}
