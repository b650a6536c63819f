package queue

import (
	"context"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// returns collects the basic.return messages of one publishing channel,
// keyed by the publish id each message carries (HeaderPublishID), until
// the publisher that sent them takes them.
//
// The broker sends a returned message's basic.return before its
// basic.ack, and the client library hands both over, in that order, from
// the one goroutine that reads the connection: it gives the return to
// listen (an unbuffered channel, so given means received) before it
// resolves the confirm. A publisher that has its confirms asks listen,
// through sync, to finish what it holds; after that, every return sent
// before those confirms is recorded.
type returns struct {
	sync chan chan struct{}
	// done is closed when listen has returned (the channel closed): every
	// return of the channel was recorded before.
	done chan struct{}

	mu   sync.Mutex
	seen map[string]returned
}

type returned struct {
	amqp.Return
	at time.Time
}

// staleReturn is how long a return nobody took is kept: its publisher gave
// up waiting for the confirm.
const staleReturn = time.Minute

// watchReturns starts recording the returns of ch until it closes. Call it
// before publishing on ch.
func watchReturns(ch *amqp.Channel) *returns {
	r := &returns{sync: make(chan chan struct{}), done: make(chan struct{}), seen: map[string]returned{}}
	in := ch.NotifyReturn(make(chan amqp.Return))
	go r.listen(in)
	return r
}

// listen records returns until the library closes in (the channel
// closed).
func (r *returns) listen(in <-chan amqp.Return) {
	defer close(r.done)
	for {
		select {
		case ret, ok := <-in:
			if !ok {
				return
			}
			r.add(ret)
		case ack := <-r.sync:
			close(ack)
		}
	}
}

func (r *returns) add(ret amqp.Return) {
	id, _ := ret.Headers[HeaderPublishID].(string)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range r.seen {
		if now.Sub(v.at) > staleReturn {
			delete(r.seen, k)
		}
	}
	r.seen[id] = returned{Return: ret, at: now}
}

// take returns, and forgets, the returns of the publishes ids. Call it once
// their confirms have arrived.
func (r *returns) take(ctx context.Context, ids []string) ([]amqp.Return, error) {
	ack := make(chan struct{})
	select {
	case r.sync <- ack:
		<-ack
	case <-r.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []amqp.Return
	for _, id := range ids {
		if ret, ok := r.seen[id]; ok {
			out = append(out, ret.Return)
			delete(r.seen, id)
		}
	}
	return out, nil
}
