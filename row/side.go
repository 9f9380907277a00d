package row

// Side says which table a column comes from.
type Side uint8

// Sides of the join.
const (
	Parent Side = iota + 1
	Child
)

func (s Side) String() string {
	if s == Parent {
		return "parent"
	}
	return "child"
}
