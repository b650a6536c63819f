package filter

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Expressions refused at registration, with where and why.
func TestCompileRefuses(t *testing.T) {
	t.Parallel()
	nested := `data.a.exists(x, data.b.exists(y, x == y))`
	tests := []struct {
		name, expr   string
		line, column int
		message      string
	}{
		{"syntax error at its position", `data.amount >`, 1, 14, "Syntax error"},
		{"syntax error on a later line", "data.a == 1 &&\n  data.b ==", 2, 12, "Syntax error"},
		{"several errors name the first and count the rest", `data.a = = 1`, 1, 8, "more)"},
		{"unknown variable", `amount > 100`, 1, 1, "undeclared reference to 'amount'"},
		{"unknown function", `data.a.frobnicate()`, 1, 18, "undeclared reference to 'frobnicate'"},
		{"wrong types for an operator", `event_type > 1`, 1, 12, "no matching overload"},
		{"not a bool: a number", `1 + 2`, 1, 1, "must be a boolean expression, but has type int"},
		{"not a bool: a string", `event_type`, 1, 1, "has type string"},
		{"not a bool: a field of data", `data.active`, 1, 1, "has type dyn"},
		{"not a bool: a ternary with a field", `data.a == 1 ? true : data.b`, 1, 1, "has type dyn"},
		{"too costly: nested comprehensions over data", nested, 0, 0, "is too costly"},
		{"too costly: says what to avoid", nested, 0, 0, "avoid a comprehension inside another"},
		{"too long", `data.a == "` + strings.Repeat("x", MaxLength) + `"`, 0, 0, "must be at most 4096 bytes"},
		{"empty", ``, 0, 0, "is empty"},
		{"blank", " \n\t", 0, 0, "is empty"},
		{"invalid UTF-8", "data.a == \"\xff\"", 0, 0, "must be valid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Compile(tc.expr)
			require.Nil(t, p)
			var fe *Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.line, fe.Line, fe.Error())
			require.Equal(t, tc.column, fe.Column, fe.Error())
			require.Contains(t, fe.Error(), tc.message)
			if tc.line > 0 {
				require.True(t, strings.HasPrefix(fe.Error(), "at "), fe.Error())
			}
		})
	}
}

// The message of a refusal starts with the position, line:column.
func TestErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := Compile("data.a &&\n  data.b ==")
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "at 2:12: Syntax error: "), err.Error())
	require.Equal(t, "is empty", (&Error{Message: "is empty"}).Error())
}

// Expressions accepted at registration, and whether their evaluation needs
// to count its cost: only when the cost depends on the payload or could
// reach the limit.
func TestCompileAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr    string
		limited bool
	}{
		{`data.amount > 100 && data.currency == "EUR"`, false},
		{`has(data.customer)`, false},
		{`event_type.startsWith("order.")`, false},
		{`source == "checkout" || event_type == "order.created"`, false},
		{`data.amount > 100 ? data.currency == "EUR" : data.currency == "USD"`, false},
		{`size(data.tags) > 2`, false},
		{`data.flag == true`, false},
		{`"vip" in data.tags`, true},
		{`data.items.exists(i, i.price > 100)`, true},
		{`data.items.map(i, i.price).exists(p, p > 100)`, true},
		{`data.email.matches("^[a-z]+@example\\.com$")`, true},
		{`data.note.contains("urgent")`, true},
		{"data.a == 1 &&\n  data.b == 2 // comments are allowed", false},
		{`data.a == "` + strings.Repeat("x", MaxLength-20) + `"`, false},
	}
	for _, tc := range tests {
		t.Run(tc.expr[:min(len(tc.expr), 40)], func(t *testing.T) {
			t.Parallel()
			p, err := Compile(tc.expr)
			require.NoError(t, err)
			require.Equal(t, tc.expr, p.String())
			require.Equal(t, tc.limited, p.limited, "cost tracked")
		})
	}
}

const order = `{"amount": 150, "currency": "EUR", "count": 3, "flag": true, "nothing": null,
	"tags": ["vip", "new"], "customer": {"id": "c1", "tier": "gold", "address": {"country": "FR"}},
	"items": [{"sku": "a", "price": 20}, {"sku": "b", "price": 120}], "email": "ann@example.com",
	"id": "9007199254740993", "note": "call back, urgent"}`

// Evaluation on an order, each filter with the answer it gives: a match,
// no match, or a run-time error (which callers count and take as no match).
func TestMatch(t *testing.T) {
	t.Parallel()
	data, err := DecodeData([]byte(order))
	require.NoError(t, err)
	const (
		yes = "match"
		no  = "no match"
		bad = ReasonError
	)
	tests := []struct {
		expr, want string
	}{
		// scalars
		{`data.amount > 100 && data.currency == "EUR"`, yes},
		{`data.amount > 200 && data.currency == "EUR"`, no},
		{`data.amount > 100 && data.currency == "USD"`, no},
		{`data.amount >= 150.0`, yes},
		{`data.amount == 150`, yes}, // a JSON number is a double; equal to the int 150
		{`data.count == 3 && data.count < 3.5`, yes},
		{`data.flag`, ""}, // refused at registration, see TestCompileRefuses
		{`data.flag == true`, yes},
		{`data.nothing == null`, yes},
		{`data.id == "9007199254740993"`, yes},
		// nested fields
		{`data.customer.tier == "gold"`, yes},
		{`data.customer.address.country in ["FR", "DE"]`, yes},
		{`data.customer.address.country == "US"`, no},
		// lists
		{`"vip" in data.tags`, yes},
		{`"gold" in data.tags`, no},
		{`size(data.tags) == 2`, yes},
		{`data.tags[0] == "vip"`, yes},
		{`data.items.exists(i, i.price > 100)`, yes},
		{`data.items.all(i, i.price > 100)`, no},
		{`data.items.filter(i, i.price > 10).size() == 2`, yes},
		{`data.items.exists_one(i, i.sku == "b")`, yes},
		// strings
		{`data.email.endsWith("@example.com")`, yes},
		{`data.email.matches("^[a-z]+@example\\.com$")`, yes},
		{`data.note.contains("urgent")`, yes},
		{`size(data.note) > 100`, no},
		// event type and source
		{`event_type.startsWith("order.")`, yes},
		{`event_type == "invoice.paid"`, no},
		{`source == "checkout"`, yes},
		// presence
		{`has(data.customer)`, yes},
		{`has(data.customer.tier)`, yes},
		{`has(data.coupon)`, no},
		{`!has(data.coupon) || data.coupon == "X"`, yes},
		{`has(data.coupon) && data.coupon == "X"`, no},
		// missing fields read without has(): a run-time error
		{`data.coupon == "X"`, bad},
		{`data.customer.vat == "FR1"`, bad},
		{`data.tags[5] == "x"`, bad},
		// unless the other side of || or && decides (CEL's logic absorbs
		// errors that cannot change the answer)
		{`data.coupon == "X" || data.amount > 100`, yes},
		{`data.coupon == "X" && data.amount > 1000`, no},
		// wrong types: a run-time error
		{`data.currency > 5`, bad},
		{`data.amount + 1 > 0`, bad}, // double + int: CEL does not convert
		{`data.amount + 1.0 > 0`, yes},
		{`data.tags.startsWith("v")`, bad},
		{`data.amount.exists(x, x == 1)`, bad},
		{`int(data.amount) + 1 == 151`, yes},
		{`data.customer == "c1"`, no}, // equality across types is false, not an error
	}
	ev := &Event{EventType: "order.created", Source: "checkout", Data: data}
	for _, tc := range tests {
		if tc.want == "" {
			continue
		}
		t.Run(tc.expr, func(t *testing.T) {
			t.Parallel()
			p, err := Compile(tc.expr)
			require.NoError(t, err)
			ok, err := p.Match(ev)
			switch tc.want {
			case bad:
				require.Error(t, err)
				require.Equal(t, ReasonError, Reason(err))
				require.False(t, ok)
			default:
				require.NoError(t, err)
				require.Equal(t, tc.want == yes, ok)
			}
		})
	}
}

// A filter whose cost grows with the payload is cut off at CostLimit on a
// large one, and does not match; the same filter on a small payload is
// evaluated in full.
func TestCostLimit(t *testing.T) {
	t.Parallel()
	p, err := Compile(`data.numbers.exists(n, n == 2)`)
	require.NoError(t, err)
	require.True(t, p.limited)
	small, err := DecodeData([]byte(`{"numbers": [1, 1, 2]}`))
	require.NoError(t, err)
	ok, err := p.Match(&Event{Data: small})
	require.NoError(t, err)
	require.True(t, ok)

	large, err := DecodeData([]byte(`{"numbers": [` + strings.Repeat("1,", 5000) + `2]}`))
	require.NoError(t, err)
	ok, err = p.Match(&Event{Data: large})
	require.ErrorIs(t, err, ErrCostLimit)
	require.Equal(t, ReasonCostLimit, Reason(err))
	require.False(t, ok)
}

// Without data (an event whose payload is unknown), data is an empty
// object: has() is false and a plain read an error.
func TestMatchWithoutData(t *testing.T) {
	t.Parallel()
	p, err := Compile(`!has(data.a)`)
	require.NoError(t, err)
	ok, err := p.Match(&Event{EventType: "x"})
	require.NoError(t, err)
	require.True(t, ok)
	p, err = Compile(`data.a == 1`)
	require.NoError(t, err)
	_, err = p.Match(&Event{EventType: "x"})
	require.Error(t, err)
}

func TestDecodeData(t *testing.T) {
	t.Parallel()
	data, err := DecodeData([]byte(`{"n": 12345678901, "s": "x", "l": [1, "a"], "o": {"k": null}}`))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"n": 12345678901.0, "s": "x", "l": []any{1.0, "a"}, "o": map[string]any{"k": nil}}, data)
	for _, raw := range []string{`[1]`, `null`, `"x"`, `{"a":`, ``} {
		_, err := DecodeData([]byte(raw))
		require.Error(t, err, raw)
	}
}

func TestReason(t *testing.T) {
	t.Parallel()
	require.Equal(t, ReasonCostLimit, Reason(ErrCostLimit))
	require.Equal(t, ReasonCostLimit, Reason(errors.Join(errors.New("x"), ErrCostLimit)))
	require.Equal(t, ReasonError, Reason(errors.New("no such key: coupon")))
}

// The cache compiles an expression once, keeps no refused one, and holds
// at most its size.
func TestCache(t *testing.T) {
	t.Parallel()
	c := NewCache(2)
	a, err := c.Program(`data.a == 1`)
	require.NoError(t, err)
	again, err := c.Program(`data.a == 1`)
	require.NoError(t, err)
	require.Same(t, a, again)

	_, err = c.Program(`data.a ==`)
	var fe *Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, 1, c.Len())

	for _, expr := range []string{`data.b == 1`, `data.c == 1`, `data.d == 1`} {
		_, err := c.Program(expr)
		require.NoError(t, err)
		require.LessOrEqual(t, c.Len(), 2)
	}
	require.Equal(t, DefaultCacheSize, NewCache(0).max)
}
