package dlqcli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// stringList is a flag that may be given several times.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("must not be empty")
	}
	*l = append(*l, v)
	return nil
}

// timeFlag is an RFC 3339 time, nil until given.
type timeFlag struct{ t **time.Time }

func (f timeFlag) String() string {
	if f.t == nil || *f.t == nil {
		return ""
	}
	return (*f.t).Format(time.RFC3339)
}

func (f timeFlag) Set(v string) error {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return errors.New("must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
	}
	t = t.UTC()
	*f.t = &t
	return nil
}

// priorityFlag is high, normal or low; empty until given.
type priorityFlag string

func (p *priorityFlag) String() string { return string(*p) }

func (p *priorityFlag) Set(v string) error {
	switch v {
	case "high", "normal", "low":
		*p = priorityFlag(v)
		return nil
	}
	return errors.New("must be high, normal or low")
}

// addFilterFlags registers the DLQ filter flags of list and batch on fs.
func addFilterFlags(fs *flag.FlagSet, f *Filter) {
	fs.Var((*stringList)(&f.WebhookIDs), "webhook", "webhook `ID` (repeatable)")
	fs.Var((*stringList)(&f.EventTypes), "event-type", "event `type` (repeatable)")
	fs.Var((*stringList)(&f.FailureCategories), "category", "failure `category`, such as server_error or timeout (repeatable)")
	fs.Var(timeFlag{&f.From}, "from", "exhausted at or after this RFC 3339 `time`")
	fs.Var(timeFlag{&f.To}, "to", "exhausted before this RFC 3339 `time`")
}

// parseArgs parses flags wherever they stand among args (the flag package
// stops at the first positional argument) and returns the positional
// arguments. Everything after "--" is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError is a command line the command cannot run.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}
