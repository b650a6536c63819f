// Package filter compiles and evaluates webhook payload filters: CEL
// expressions (github.com/google/cel-go) over an event's event_type,
// source and data that must be true for a webhook to receive the event.
//
// A filter is checked once, when it is registered: it must parse, refer
// only to the three variables, have type bool, be at most MaxLength bytes,
// and have an estimated worst-case cost of at most MaxEstimatedCost. The
// estimate assumes every list, map and string in data as large as a whole
// payload may be (AssumedDataSize), so what it refuses are expressions
// whose cost grows faster than the payload: a comprehension inside another
// over data. Evaluation is then cut off at CostLimit, so that no event,
// whatever its payload, holds the publish path for long; a filter cut off,
// or failing at run time (a missing field read without has(), a
// comparison of the wrong types), does not match.
//
// Compiling takes about a tenth of a millisecond and evaluating a typical
// filter a fraction of a microsecond, so callers compile once per
// expression (Cache) and evaluate per event.
package filter

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
)

// Limits on filters.
const (
	// MaxLength bounds an expression, in bytes.
	MaxLength = 4 << 10
	// AssumedDataSize is the size the registration estimate gives every
	// list, map and string in data, and every string the expression
	// builds from them: no list or string of a payload is larger than the
	// largest payload accepted by default (256 KiB).
	AssumedDataSize = 256 << 10
	// MaxEstimatedCost bounds the estimated worst-case cost of a filter at
	// registration, in CEL cost units. A comprehension over one list of
	// data is estimated at about six units per element, 1.6 million for
	// the assumed size; a comprehension inside another is estimated in
	// the hundreds of billions.
	MaxEstimatedCost = 10_000_000
	// CostLimit cuts off an evaluation that reaches this many CEL cost
	// units: about 1,500 iterations of a comprehension. A filter over
	// scalar fields costs under 20.
	CostLimit = 10_000
)

// Error is an expression refused at registration. Line and Column (from 1)
// locate the first problem when it has a place in the text; they are 0
// otherwise (too long, too costly).
type Error struct {
	Line, Column int
	Message      string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("at %d:%d: %s", e.Line, e.Column, e.Message)
	}
	return e.Message
}

// ErrCostLimit is the run-time error of an evaluation cut off at CostLimit.
var ErrCostLimit = errors.New("the filter reached its cost limit")

// Program is a compiled filter, safe for concurrent use.
type Program struct {
	text string
	prg  cel.Program
	// limited: the evaluation counts its cost and stops at CostLimit.
	limited bool
}

// String returns the expression the program was compiled from.
func (p *Program) String() string { return p.text }

// Compile checks expr and compiles it. A refused expression is an *Error.
// expr is used as given: callers trim it (and treat an empty one as no
// filter) before.
func Compile(expr string) (*Program, error) {
	if len(expr) > MaxLength {
		return nil, &Error{Message: fmt.Sprintf("must be at most %d bytes, got %d", MaxLength, len(expr))}
	}
	if strings.TrimSpace(expr) == "" {
		return nil, &Error{Message: "is empty"}
	}
	if !utf8.ValidString(expr) {
		return nil, &Error{Message: "must be valid UTF-8"}
	}
	e, err := environment()
	if err != nil {
		return nil, fmt.Errorf("filter environment: %w", err)
	}
	ast, iss := e.Compile(expr)
	if iss.Err() != nil {
		return nil, issueError(iss.Errors())
	}
	if out := ast.OutputType(); !out.IsExactType(types.BoolType) {
		msg := fmt.Sprintf("must be a boolean expression, but has type %s", out)
		if out.IsExactType(types.DynType) {
			msg += " (a field of data may hold anything: compare it, e.g. data.flag == true)"
		}
		return nil, &Error{Line: 1, Column: 1, Message: msg}
	}
	limited, err := needsCostLimit(e, ast)
	if err != nil {
		return nil, err
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if limited {
		opts = append(opts, cel.CostLimit(CostLimit))
	}
	prg, err := e.Program(ast, opts...)
	if err != nil {
		return nil, &Error{Message: err.Error()}
	}
	return &Program{text: expr, prg: prg, limited: limited}, nil
}

// environment is the one CEL environment every filter is compiled in: the
// standard library, the three variables, and numeric comparisons across
// int, uint and double (JSON numbers are doubles, written constants often
// ints). It is immutable once built.
var environment = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("event_type", cel.StringType),
		cel.Variable("source", cel.StringType),
		cel.Variable("data", cel.DynType),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxLength),
	)
})

// issueError turns CEL's issues into an *Error at the first one, saying how
// many more there are.
func issueError(errs []*cel.Error) error {
	if len(errs) == 0 {
		return &Error{Message: "is not a valid expression"}
	}
	first := errs[0]
	msg := strings.TrimSuffix(first.Message, " (in container '')")
	if n := len(errs) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	out := &Error{Message: msg}
	if line := first.Location.Line(); line > 0 {
		// CEL counts columns from 0.
		out.Line, out.Column = line, first.Location.Column()+1
	}
	return out
}

// needsCostLimit estimates the worst-case cost of ast, refuses it over
// MaxEstimatedCost, and says whether evaluation must track its cost. It
// need not when the estimate does not depend on the size of data (doubling
// the assumed size leaves it unchanged) and is within CostLimit: such an
// expression can never reach the limit, and tracking the cost of an
// evaluation makes it several times slower.
func needsCostLimit(e *cel.Env, ast *cel.Ast) (bool, error) {
	est, err := e.EstimateCost(ast, sizes{AssumedDataSize})
	if err != nil {
		return false, &Error{Message: fmt.Sprintf("cost cannot be estimated: %v", err)}
	}
	if est.Max > MaxEstimatedCost {
		return false, &Error{Message: fmt.Sprintf(
			"is too costly: its estimated cost for a payload of %d KiB is %s, over the limit of %d (avoid a comprehension inside another over data)",
			AssumedDataSize>>10, costString(est.Max), MaxEstimatedCost)}
	}
	larger, err := e.EstimateCost(ast, sizes{2 * AssumedDataSize})
	if err != nil {
		return false, &Error{Message: fmt.Sprintf("cost cannot be estimated: %v", err)}
	}
	return larger.Max != est.Max || est.Max > CostLimit, nil
}

func costString(c uint64) string {
	if c == ^uint64(0) {
		return "unbounded"
	}
	return fmt.Sprint(c)
}

// sizes is the cost estimator of registration: every value whose size CEL
// cannot know (data's lists, maps and strings, event_type and source) is
// taken to be at most max.
type sizes struct{ max uint64 }

func (s sizes) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: s.max}
}

func (sizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// Match evaluates the program on ev. It returns an error when the
// evaluation fails (ErrCostLimit when it was cut off); callers take that as
// no match.
func (p *Program) Match(ev *Event) (bool, error) {
	out, _, err := p.prg.Eval(ev)
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
			return false, ErrCostLimit
		}
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("the filter gave %s, not a bool", out.Type().TypeName())
	}
	return bool(b), nil
}

// Reasons a filter failed at run time, for metrics.
const (
	ReasonError     = "error"
	ReasonCostLimit = "cost_limit"
)

// Reason classifies a run-time error of Match: ReasonCostLimit for an
// evaluation cut off, ReasonError for any other.
func Reason(err error) string {
	if errors.Is(err, ErrCostLimit) {
		return ReasonCostLimit
	}
	return ReasonError
}
