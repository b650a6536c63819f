package filter

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/google/cel-go/interpreter"
)

// Event is what a filter sees of an event: its type, its source, and its
// payload decoded once (DecodeData) for every filter evaluated on it. JSON
// values become CEL values: objects maps, arrays lists, numbers doubles,
// and null null.
type Event struct {
	EventType string
	Source    string
	Data      map[string]any
}

// DecodeData decodes a payload (a JSON object) for Event.Data. Numbers are
// float64: CEL's doubles, as in its JSON mapping.
func DecodeData(raw []byte) (map[string]any, error) {
	var data map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&data); err != nil {
		return nil, fmt.Errorf("decode event data: %w", err)
	}
	if data == nil {
		return nil, fmt.Errorf("decode event data: not a JSON object")
	}
	return data, nil
}

// ResolveName makes an Event the activation of an evaluation: it binds the
// three variables a filter may use.
func (ev *Event) ResolveName(name string) (any, bool) {
	switch name {
	case "event_type":
		return ev.EventType, true
	case "source":
		return ev.Source, true
	case "data":
		if ev.Data == nil {
			return map[string]any{}, true
		}
		return ev.Data, true
	}
	return nil, false
}

// Parent is part of interpreter.Activation: an Event has none.
func (ev *Event) Parent() interpreter.Activation { return nil }
