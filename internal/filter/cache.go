package filter

import "sync"

// Cache holds compiled programs by expression text, so that a filter is
// compiled once in a process however many webhooks carry it and however
// many events it is evaluated on. A webhook whose filter changes simply
// asks for the new text. It is safe for concurrent use.
type Cache struct {
	mu       sync.Mutex
	programs map[string]*Program
	max      int
}

// DefaultCacheSize is the number of programs a cache holds unless told
// otherwise: a tenant may have 1000 webhooks, each with its own filter.
const DefaultCacheSize = 10_000

// NewCache returns a cache of at most max programs (DefaultCacheSize when
// max < 1). When it is full, an arbitrary program makes room for a new
// one: it is compiled again when next needed.
func NewCache(max int) *Cache {
	if max < 1 {
		max = DefaultCacheSize
	}
	return &Cache{programs: map[string]*Program{}, max: max}
}

// Program returns the compiled program of expr, compiling it on first use.
// An expression that does not compile is not kept: it was refused at
// registration, and is only met again if the rules tightened since.
func (c *Cache) Program(expr string) (*Program, error) {
	c.mu.Lock()
	p, ok := c.programs[expr]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := Compile(expr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.programs) >= c.max {
		for k := range c.programs {
			delete(c.programs, k)
			break
		}
	}
	c.programs[expr] = p
	return p, nil
}

// Len is the number of programs held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.programs)
}
