package row

import (
	"bytes"
	"math"
	"testing"
)

func TestArray(t *testing.T) {
	inner := Array([]Value{Int(1), Null()})
	for _, tc := range []struct {
		elems []Value
		text  string
	}{
		{nil, `[]`},
		{[]Value{Int(1), Null(), Int(-3)}, `[1,null,-3]`},
		{[]Value{String("a\"b"), String(""), Null()}, `["a\"b","",null]`},
		{[]Value{Float(math.Inf(-1)), Float(0.5)}, `["-Inf",0.5]`},
		{[]Value{Decimal("-1.50"), Date(-1), Bool(true)}, `["-1.50","1969-12-31",true]`},
		{[]Value{inner, Array(nil)}, `[[1,null],[]]`},
		{[]Value{Bytes([]byte{0, 0xff})}, "[\"\\u0000\ufffd\"]"},
	} {
		a := Array(tc.elems)
		if a.Kind != KindArray {
			t.Fatalf("kind %v", a.Kind)
		}
		got, err := a.Elems(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tc.elems) {
			t.Fatalf("%s: %d elements, want %d", tc.text, len(got), len(tc.elems))
		}
		for i := range got {
			if !got[i].Equal(tc.elems[i]) {
				t.Errorf("%s: element %d = %v, want %v", tc.text, i, got[i], tc.elems[i])
			}
		}
		if a.Text() != tc.text || string(a.AppendJSON(nil)) != tc.text {
			t.Errorf("Text %s, JSON %s, want %s", a.Text(), a.AppendJSON(nil), tc.text)
		}
		if !a.Equal(Array(tc.elems)) || (len(tc.elems) > 0 && a.Equal(Array(tc.elems[1:]))) {
			t.Errorf("%s: Equal", tc.text)
		}
		// Stored rows and key tuples keep arrays.
		r, err := DecodeRow(nil, AppendRow(nil, []Value{Int(7), a, String("z")}))
		if err != nil || len(r) != 3 || !r[1].Equal(a) || !r[2].Equal(String("z")) {
			t.Errorf("%s: row round trip %v %v", tc.text, r, err)
		}
		k, n, err := DecodeKey(nil, AppendKey(nil, []Value{a, Int(1)}), 2)
		if err != nil || n == 0 || !k[0].Equal(a) || !k[1].Equal(Int(1)) {
			t.Errorf("%s: key round trip %v %v", tc.text, k, err)
		}
	}
	if _, err := String("x").Elems(nil); err == nil {
		t.Error("Elems of a string succeeded")
	}
	if _, err := (Value{Kind: KindArray, Str: "\x7f"}).Elems(nil); err == nil {
		t.Error("Elems of a corrupt array succeeded")
	}
}

func TestAppendRowValue(t *testing.T) {
	vals := []Value{Null(), Int(-5), Float(1.5), String("s"), Unavailable(), Array([]Value{Int(1)})}
	var one []byte
	for _, v := range vals {
		one = AppendRowValue(one, v)
	}
	if !bytes.Equal(one, AppendRow(nil, vals)) {
		t.Fatal("AppendRowValue differs from AppendRow")
	}
	if KindArray.String() != "array" {
		t.Error(KindArray.String())
	}
}
