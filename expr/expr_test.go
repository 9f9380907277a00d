package expr

import (
	"testing"

	"github.com/cdcjoin/cdcjoin/row"
)

func col(i int) *Col { return &Col{Index: i, Name: string(rune('a' + i))} }

// The rows: a=1 (int), b=NULL, c='TXT', d=12.50 (numeric), e=1.5 (float),
// f=” , g='NULL', h=date 2024-01-02, i=timestamp 2024-01-02T03:04:05Z.
var testRow = []row.Value{
	row.Int(1), row.Null(), row.String("TXT"), row.Decimal("12.50"), row.Float(1.5),
	row.String(""), row.String("NULL"), row.Date(19724), row.Timestamp(1704164645000000),
}

func TestEval(t *testing.T) {
	T, F, N := row.Bool(true), row.Bool(false), row.Null()
	lit := func(s string) *Lit { return &Lit{Text: s} }
	num := func(i int64) *Const { return &Const{V: row.Int(i)} }
	cases := []struct {
		e    Expr
		want row.Value
	}{
		{&Cmp{Op: Ne, L: col(2), R: lit("TXT")}, F},
		{&Cmp{Op: Ne, L: col(1), R: lit("TXT")}, N},
		{&Cmp{Op: Eq, L: col(5), R: lit("")}, T},
		{&IsNull{X: col(5)}, F},
		{&IsNull{X: col(6)}, F},
		{&IsNull{X: col(1)}, T},
		{&In{X: col(1), List: []Expr{num(1), num(2)}}, N},
		{&In{X: col(0), List: []Expr{num(2), &Const{V: N}}}, N},
		{&In{X: col(0), List: []Expr{num(1), &Const{V: N}}}, T},
		{&In{X: col(0), List: []Expr{num(2), &Const{V: N}}, Not: true}, N},
		{&And{Args: []Expr{&Cmp{Op: Eq, L: col(1), R: num(1)}, &Cmp{Op: Eq, L: col(0), R: num(2)}}}, F},
		{&And{Args: []Expr{&Cmp{Op: Eq, L: col(1), R: num(1)}, &Cmp{Op: Eq, L: col(0), R: num(1)}}}, N},
		{&Or{Args: []Expr{&Cmp{Op: Eq, L: col(1), R: num(1)}, &Cmp{Op: Eq, L: col(0), R: num(1)}}}, T},
		{&Not{X: &Cmp{Op: Eq, L: col(1), R: num(1)}}, N},
		{&Cmp{Op: Lt, L: col(0), R: col(3)}, T},
		{&Cmp{Op: Eq, L: col(3), R: &Const{V: row.Decimal("12.5")}}, T},
		{&Cmp{Op: Lt, L: col(4), R: col(3)}, T},
		{&Cmp{Op: Eq, L: col(3), R: lit("12.500")}, T},
		{&Cmp{Op: Lt, L: col(7), R: lit("2024-01-03")}, T},
		{&Cmp{Op: Gt, L: col(8), R: lit("2024-01-02 03:04:04+00")}, T},
		{&Cmp{Op: Lt, L: col(7), R: col(8)}, T},
		{&Like{X: col(2), Pattern: lit("T%")}, T},
		{&Like{X: col(2), Pattern: lit("t%")}, F},
		{&Like{X: col(2), Pattern: lit("T_T")}, T},
		{&Like{X: &Lit{Text: "a%b"}, Pattern: lit(`a\%b`)}, T},
		{&Like{X: &Lit{Text: "axb"}, Pattern: lit(`a\%b`)}, F},
		{&Like{X: col(1), Pattern: lit("%")}, N},
		{&Distinct{L: col(1), R: &Const{V: N}}, F},
		{&Distinct{L: col(1), R: num(1)}, T},
		{&Concat{L: col(2), R: col(0)}, row.String("TXT1")},
		{&Concat{L: col(2), R: col(1)}, N},
		{&Coalesce{Args: []Expr{col(1), col(2)}}, row.String("TXT")},
		{&Arith{Op: '*', L: col(3), R: num(2)}, row.Decimal("25.00")},
		{&Arith{Op: '+', L: col(3), R: &Const{V: row.Decimal("0.005")}}, row.Decimal("12.505")},
		{&Arith{Op: '/', L: num(7), R: num(-2)}, row.Int(-3)},
		{&Arith{Op: '%', L: num(-7), R: num(2)}, row.Int(-1)},
		{&Func{Name: "upper", X: &Lit{Text: "aé"}}, row.String("Aé")},
		{&Case{When: []Expr{&Cmp{Op: Eq, L: col(1), R: num(1)}, &Cmp{Op: Eq, L: col(0), R: num(1)}}, Then: []Expr{num(10), num(20)}}, row.Int(20)},
		{&Case{Operand: col(2), When: []Expr{lit("X"), lit("TXT")}, Then: []Expr{num(1), num(2)}, Else: num(3)}, row.Int(2)},
		{&NullIf{L: col(0), R: num(1)}, N},
		{&Neg{X: col(3)}, row.Decimal("-12.50")},
	}
	for _, c := range cases {
		got, err := c.e.Eval(testRow)
		if err != nil {
			t.Errorf("%s: %v", c.e, err)
			continue
		}
		if !got.Equal(c.want) {
			t.Errorf("%s = %v (%s), want %v (%s)", c.e, got.Text(), got.Kind, c.want.Text(), c.want.Kind)
		}
	}
}

func TestEvalErrors(t *testing.T) {
	for _, e := range []Expr{
		&Cmp{Op: Eq, L: col(2), R: col(0)},                                              // text = integer
		&Arith{Op: '+', L: &Const{V: row.Int(1 << 62)}, R: &Const{V: row.Int(1 << 62)}}, // overflow
		&Arith{Op: '/', L: col(0), R: &Const{V: row.Int(0)}},
		&Like{X: col(2), Pattern: &Lit{Text: `ab\`}},
		&Cmp{Op: Eq, L: col(0), R: &Lit{Text: "x"}},
	} {
		if v, err := e.Eval(testRow); err == nil {
			t.Errorf("%s = %v, want an error", e, v.Text())
		}
	}
}

func TestNonNullable(t *testing.T) {
	a := &Col{Table: 0, Name: "a"}
	b := &Col{Table: 1, Name: "b"}
	eq := &Cmp{Op: Eq, L: a, R: b}
	for _, c := range []struct {
		e    Expr
		want []int
	}{
		{eq, []int{0, 1}},
		{&IsNull{X: b}, nil},
		{&IsNull{X: b, Not: true}, []int{1}},
		{&Not{X: &IsNull{X: b, Not: true}}, nil},
		{&Or{Args: []Expr{&Cmp{Op: Eq, L: a, R: &Const{}}, eq}}, []int{0}},
		{&And{Args: []Expr{&Cmp{Op: Eq, L: a, R: &Const{}}, &IsNull{X: b, Not: true}}}, []int{0, 1}},
		{&Coalesce{Args: []Expr{a, b}}, nil},
		{&Cmp{Op: Eq, L: &Coalesce{Args: []Expr{a, b}}, R: &Const{V: row.Int(1)}}, nil},
	} {
		got := NonNullable(c.e)
		if len(got) != len(c.want) || (len(got) > 0 && !equalInts(got, c.want)) {
			t.Errorf("NonNullable(%s) = %v, want %v", c.e, got, c.want)
		}
	}
}

func equalInts(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}
