package schedule

import "time"

// Backlog counts the reservations handed out for something served one at
// a time (a host's connections, a tenant's slots) that are still
// waiting. Each reservation goes after those still waiting; what was
// served since the last look is taken off at the pace given now, not at
// the pace of when the reservations were made, so that a stall that made
// the service look slow for a moment does not put later reservations
// behind ones it no longer needs. The zero Backlog is empty. It is not
// safe for concurrent use.
type Backlog struct {
	waiting float64
	at      time.Time
}

// Waiting returns how many reservations are still waiting at now, served
// one every step since the last call to Reserve or Drain.
func (b *Backlog) Waiting(now time.Time, step time.Duration) float64 {
	elapsed := now.Sub(b.at)
	if elapsed <= 0 {
		return b.waiting
	}
	return max(0, b.waiting-float64(elapsed)/float64(max(step, 1)))
}

// Drain takes off what was served by now at step, and returns what is
// still waiting.
func (b *Backlog) Drain(now time.Time, step time.Duration) float64 {
	if now.After(b.at) {
		b.waiting, b.at = b.Waiting(now, step), now
	}
	return b.waiting
}

// Reserve drains b at step and hands out the next reservation: one step
// after the last of those still waiting.
func (b *Backlog) Reserve(now time.Time, step time.Duration) time.Time {
	n := b.Drain(now, step) + 1
	b.waiting = n
	return now.Add(time.Duration(n * float64(step)))
}
