package e2e

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"unicode/utf8"
)

// Stmt is one SQL statement with its positional ($1…) arguments.
type Stmt struct {
	SQL  string
	Args []any
}

// Tx is one transaction: its statements run between BEGIN and COMMIT.
type Tx struct {
	Name  string // what it exercises (scripted transactions), for logs
	Stmts []Stmt
}

// Size bounds a workload.
type Size struct {
	BaseUsers   int // users loaded before the connector snapshots
	BaseDomains int // domains loaded before the snapshot
	HotDomains  int // domains of the hot user
	RandomTxs   int // random transactions (Random splits them into phases)
	ToastBytes  int // length of TOASTed domain names (> ~2 KB to be stored out of line)
}

// DefaultSize keeps the whole e2e within its CI budget on a 2-core machine.
var DefaultSize = Size{BaseUsers: 200, BaseDomains: 1000, HotDomains: 3000, RandomTxs: 400, ToastBytes: 3000}

type user struct{ first, last *string }

type domain struct {
	user int64
	long bool // domain_name is TOASTed
}

// Workload generates a deterministic DML history for the schema of
// deploy/local/schema.sql from a seed. It keeps a model of the tables so
// that statements mostly hit existing rows and new primary keys never
// collide; every statement it generates succeeds on a database that holds
// exactly what the workload's earlier transactions produced, starting from
// schema.sql's example rows.
//
// A Workload is not safe for concurrent use.
type Workload struct {
	rng        *rand.Rand
	size       Size
	users      map[int64]user
	domains    map[int64]domain
	deleted    []int64 // deleted user ids that may come back
	nextUser   int64
	nextDomain int64
	hot        int64 // the hot user's id (0 until HotUser)
	protected  map[int64]bool

	// dns_records (the multi-table job's third table), from a random
	// stream of their own: the users/domains statements are those of a
	// workload without records.
	rrng       *rand.Rand
	records    map[int64]record
	nextRecord int64
}

// record is a dns_records row of the model: its domain (0: NULL).
type record struct{ domain int64 }

// Marker rows: MarkerUser and MarkerDomain exist from schema.sql on and are
// never deleted or re-keyed, so a final transaction touching both can mark
// the end of the workload in both Debezium topics.
const (
	MarkerUser   = 2
	MarkerDomain = 4
)

// NewWorkload returns a workload for seed and size.
func NewWorkload(seed uint64, size Size) *Workload {
	w := &Workload{
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		size:       size,
		users:      map[int64]user{},
		domains:    map[int64]domain{},
		nextUser:   4,
		nextDomain: 5,
		protected:  map[int64]bool{MarkerUser: true, 3: true},
		rrng:       rand.New(rand.NewPCG(seed^0x5bd1e995, seed+0x2545f4914f6cdd1d)),
		records:    map[int64]record{1: {1}, 2: {1}, 3: {4}, 4: {0}},
		nextRecord: 5,
	}
	// schema.sql's example rows.
	for id, n := range map[int64][2]string{1: {"Egor", "Myasnik"}, 2: {"Pavel", "Hvastun"}, 3: {"Mitya", "Volk"}} {
		w.users[id] = user{strp(n[0]), strp(n[1])}
	}
	for id, u := range map[int64]int64{1: 1, 2: 1, 3: 1, 4: 3} {
		w.domains[id] = domain{user: u}
	}
	return w
}

func strp(s string) *string { return &s }

var (
	firstNames = []string{"Egor", "Pavel", "Mitya", "Anna", "Olga", "Ivan", "Zoë", "José", "Łukasz", "O'Brien", "李", "Ёжик", "", "a,b", `back\slash`}
	lastNames  = []string{"Myasnik", "Hvastun", "Volk", "Smith", "Müller", "Nguyễn", "D'Arcy", "Квас", "tab\there", "new\nline", ""}
	words      = []string{"approval", "rejection", "stoppage", "cancellation", "example", "shop", "zone", "data", "cloud", "naïve", "日本"}
)

func (w *Workload) pick(s []string) string { return s[w.rng.IntN(len(s))] }

func (w *Workload) name() *string {
	if w.rng.IntN(20) == 0 {
		return nil
	}
	return strp(w.pick(firstNames))
}

func (w *Workload) last() *string {
	if w.rng.IntN(15) == 0 {
		return nil
	}
	return strp(fmt.Sprintf("%s-%d", w.pick(lastNames), w.rng.IntN(1000)))
}

func (w *Workload) domainName() string {
	return fmt.Sprintf("%s-%s-%d.example", w.pick(words), w.pick(words), w.rng.IntN(100000))
}

// longName is a TOASTable domain name: ToastBytes of varied text.
func (w *Workload) longName() string {
	var b strings.Builder
	for b.Len() < w.size.ToastBytes {
		fmt.Fprintf(&b, "%s-%d.", w.pick(words), w.rng.Uint32())
	}
	s := b.String()[:w.size.ToastBytes]
	for !utf8.ValidString(s) { // do not cut a rune in two
		s = s[:len(s)-1]
	}
	return s
}

func (w *Workload) price() string {
	return fmt.Sprintf("%d.%02d", w.rng.IntN(1000), w.rng.IntN(100))
}

// sortedKeys returns the keys in order, so that picks are deterministic.
func sortedKeys[V any](m map[int64]V) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

func (w *Workload) anyUser(mutable bool) (int64, bool) {
	ks := sortedKeys(w.users)
	if mutable {
		var m []int64
		for _, k := range ks {
			if !w.protected[k] && k != w.hot {
				m = append(m, k)
			}
		}
		ks = m
	}
	if len(ks) == 0 {
		return 0, false
	}
	return ks[w.rng.IntN(len(ks))], true
}

func (w *Workload) anyDomain(mutable bool) (int64, bool) {
	ks := sortedKeys(w.domains)
	if mutable {
		var m []int64
		for _, k := range ks {
			if k != MarkerDomain {
				m = append(m, k)
			}
		}
		ks = m
	}
	if len(ks) == 0 {
		return 0, false
	}
	return ks[w.rng.IntN(len(ks))], true
}

// --- statements, each updating the model ---

func (w *Workload) insertUser(id int64) Stmt {
	u := user{w.name(), w.last()}
	w.users[id] = u
	return Stmt{`INSERT INTO users (id, firstname, lastname, email, balance, birthday) VALUES ($1, $2, $3, $4, $5::numeric, DATE '1990-01-01' + $6::int)`,
		[]any{id, u.first, u.last, fmt.Sprintf("u%d@example.com", id), w.price(), w.rng.IntN(10000)}}
}

func (w *Workload) newUser() Stmt {
	id := w.nextUser
	w.nextUser++
	return w.insertUser(id)
}

func (w *Workload) insertDomain(userID int64, long bool) Stmt {
	id := w.nextDomain
	w.nextDomain++
	return w.insertDomainID(id, userID, long)
}

func (w *Workload) insertDomainID(id, userID int64, long bool) Stmt {
	w.domains[id] = domain{user: userID, long: long}
	name := w.domainName()
	if long {
		name = w.longName()
	}
	return Stmt{`INSERT INTO domains (id, user_id, domain_name, registered_at, price) VALUES ($1, $2, $3, now(), $4::numeric)`,
		[]any{id, userID, name, w.price()}}
}

func (w *Workload) renameUser(id int64) Stmt {
	u := w.users[id]
	switch w.rng.IntN(3) {
	case 0:
		u.first = w.name()
		w.users[id] = u
		return Stmt{`UPDATE users SET firstname = $2 WHERE id = $1`, []any{id, u.first}}
	case 1:
		u.last = w.last()
		w.users[id] = u
		return Stmt{`UPDATE users SET lastname = $2 WHERE id = $1`, []any{id, u.last}}
	}
	u.first, u.last = w.name(), w.last()
	w.users[id] = u
	return Stmt{`UPDATE users SET firstname = $2, lastname = $3 WHERE id = $1`, []any{id, u.first, u.last}}
}

func (w *Workload) renameDomain(id int64) Stmt {
	d := w.domains[id]
	d.long = w.rng.IntN(10) == 0
	w.domains[id] = d
	name := w.domainName()
	if d.long {
		name = w.longName()
	}
	return Stmt{`UPDATE domains SET domain_name = $2 WHERE id = $1`, []any{id, name}}
}

// targetUser picks a user for a child: mostly an existing one, sometimes
// the hot user or an id that does not exist (an orphan, or a parent that
// arrives later).
func (w *Workload) targetUser() int64 {
	switch r := w.rng.IntN(20); {
	case r == 0 && w.hot != 0:
		return w.hot
	case r == 1:
		return w.nextUser + int64(w.rng.IntN(3)) // a parent that may be inserted later
	}
	if id, ok := w.anyUser(false); ok {
		return id
	}
	return 1
}

func (w *Workload) moveDomain(id, to int64) Stmt {
	d := w.domains[id]
	d.user = to
	w.domains[id] = d
	return Stmt{`UPDATE domains SET user_id = $2 WHERE id = $1`, []any{id, to}}
}

func (w *Workload) deleteDomain(id int64) Stmt {
	delete(w.domains, id)
	return Stmt{`DELETE FROM domains WHERE id = $1`, []any{id}}
}

func (w *Workload) deleteUser(id int64) Stmt {
	delete(w.users, id)
	w.deleted = append(w.deleted, id)
	return Stmt{`DELETE FROM users WHERE id = $1`, []any{id}}
}

func (w *Workload) rekeyUser(id int64) Stmt {
	nid := w.nextUser
	w.nextUser++
	w.users[nid] = w.users[id]
	delete(w.users, id)
	return Stmt{`UPDATE users SET id = $2 WHERE id = $1`, []any{id, nid}}
}

func (w *Workload) moveChildren(from, to int64) Stmt {
	for _, id := range sortedKeys(w.domains) {
		if d := w.domains[id]; d.user == from {
			d.user = to
			w.domains[id] = d
		}
	}
	return Stmt{`UPDATE domains SET user_id = $2 WHERE user_id = $1`, []any{from, to}}
}

func (w *Workload) rekeyDomain(id int64) Stmt {
	nid := w.nextDomain
	w.nextDomain++
	w.domains[nid] = w.domains[id]
	delete(w.domains, id)
	return Stmt{`UPDATE domains SET id = $2 WHERE id = $1`, []any{id, nid}}
}

// priceOnly changes a column outside the join's projection; on a TOASTed
// row Debezium sends domain_name as __debezium_unavailable_value.
func (w *Workload) priceOnly(id int64) Stmt {
	return Stmt{`UPDATE domains SET price = $2::numeric WHERE id = $1`, []any{id, w.price()}}
}

// --- dns_records ---

var rtypes = []string{"A", "AAAA", "MX", "TXT", "CNAME", "txt", ""}

// recordDomain picks a record's domain: mostly an existing one, sometimes
// none (NULL), one that does not exist (yet), or a hot domain.
func (w *Workload) recordDomain() any {
	switch r := w.rrng.IntN(20); {
	case r == 0:
		return nil
	case r == 1:
		return w.nextDomain + int64(w.rrng.IntN(3))
	}
	ks := sortedKeys(w.domains)
	if len(ks) == 0 {
		return int64(1)
	}
	return ks[w.rrng.IntN(len(ks))]
}

func domainOf(v any) int64 {
	if id, ok := v.(int64); ok {
		return id
	}
	return 0
}

func (w *Workload) ttl() any {
	if w.rrng.IntN(8) == 0 {
		return nil
	}
	return []int{60, 300, 3600, 86400}[w.rrng.IntN(4)]
}

func (w *Workload) insertRecord() Stmt {
	id := w.nextRecord
	w.nextRecord++
	dom := w.recordDomain()
	w.records[id] = record{domainOf(dom)}
	return Stmt{`INSERT INTO dns_records (id, domain_id, rtype, ttl, value) VALUES ($1, $2::bigint, $3, $4::int, $5)`,
		[]any{id, dom, rtypes[w.rrng.IntN(len(rtypes))], w.ttl(), fmt.Sprintf("192.0.2.%d", w.rrng.IntN(256))}}
}

func (w *Workload) anyRecord() (int64, bool) {
	ks := sortedKeys(w.records)
	if len(ks) == 0 {
		return 0, false
	}
	return ks[w.rrng.IntN(len(ks))], true
}

// recordStmt is a random change of dns_records: an insert, a change of its
// type or TTL (into or out of the join's conditions), a move to another
// domain (or none), a delete, a primary-key change, or a change outside the
// query's columns.
func (w *Workload) recordStmt() Stmt {
	id, ok := w.anyRecord()
	r := w.rrng.IntN(100)
	if !ok || r < 30 {
		return w.insertRecord()
	}
	switch {
	case r < 50:
		return Stmt{`UPDATE dns_records SET rtype = $2 WHERE id = $1`, []any{id, rtypes[w.rrng.IntN(len(rtypes))]}}
	case r < 60:
		return Stmt{`UPDATE dns_records SET ttl = $2::int WHERE id = $1`, []any{id, w.ttl()}}
	case r < 75:
		dom := w.recordDomain()
		w.records[id] = record{domainOf(dom)}
		return Stmt{`UPDATE dns_records SET domain_id = $2::bigint WHERE id = $1`, []any{id, dom}}
	case r < 88:
		delete(w.records, id)
		return Stmt{`DELETE FROM dns_records WHERE id = $1`, []any{id}}
	case r < 93:
		nid := w.nextRecord
		w.nextRecord++
		w.records[nid] = w.records[id]
		delete(w.records, id)
		return Stmt{`UPDATE dns_records SET id = $2 WHERE id = $1`, []any{id, nid}}
	}
	return Stmt{`UPDATE dns_records SET value = value || '.' WHERE id = $1`, []any{id}}
}

// BaseRecords is the dns_records part of the data loaded before the
// connector is registered: n records (after BaseLoad, so that most point
// at existing domains).
func (w *Workload) BaseRecords(n int) Tx {
	tx := Tx{Name: "base load dns_records"}
	for i := 0; i < n; i++ {
		tx.Stmts = append(tx.Stmts, w.insertRecord())
	}
	return tx
}

// WithRecords appends 0–2 random dns_records statements to each of txs
// (from the records' own random stream).
func (w *Workload) WithRecords(txs []Tx) []Tx {
	for i := range txs {
		for k := w.rrng.IntN(3); k > 0; k-- {
			txs[i].Stmts = append(txs[i].Stmts, w.recordStmt())
		}
	}
	return txs
}

// --- transactions ---

// BaseLoad is the data loaded before the connector is registered (it
// arrives as Debezium snapshot records, op=r).
func (w *Workload) BaseLoad() []Tx {
	var txs []Tx
	tx := Tx{Name: "base load"}
	for i := 0; i < w.size.BaseUsers; i++ {
		tx.Stmts = append(tx.Stmts, w.newUser())
	}
	txs = append(txs, tx)
	tx = Tx{Name: "base load domains"}
	for i := 0; i < w.size.BaseDomains; i++ {
		u, _ := w.anyUser(false)
		if i%50 == 0 {
			u = w.nextUser + 1000 // orphan: no such user
		}
		tx.Stmts = append(tx.Stmts, w.insertDomain(u, i%97 == 0))
	}
	return append(txs, tx)
}

// Scripted returns the hard cases of NOTES.md §3 as named transactions.
func (w *Workload) Scripted() []Tx {
	var txs []Tx
	add := func(name string, s ...Stmt) { txs = append(txs, Tx{Name: name, Stmts: s}) }

	a := w.nextUser
	add("insert parent and children in one transaction", w.newUser(), w.insertDomain(a, false), w.insertDomain(a, false), w.insertDomain(a, false))
	add("rename parent (fan-out)", w.renameUser(a))
	b := w.nextUser
	add("second parent", w.newUser())
	d1 := w.nextDomain - 3
	add("child foreign-key move", w.moveDomain(d1, b))
	add("delete child", w.deleteDomain(d1+1))
	add("delete parent with children", w.deleteUser(a))
	add("re-create deleted parent", w.insertUser(a))
	c := w.nextUser
	w.nextUser++
	dc := w.nextDomain
	add("children before their parent", w.insertDomain(c, false), w.insertDomain(c, false))
	add("parent arrives after its children", w.insertUser(c))
	add("parent primary-key change", w.rekeyUser(c))
	add("children follow the re-keyed parent", w.moveChildren(c, w.nextUser-1))
	add("child primary-key change", w.rekeyDomain(dc))
	add("parent primary-key change and children moved in one transaction", func() []Stmt {
		nid := w.nextUser
		return []Stmt{w.rekeyUser(b), w.moveChildren(b, nid)}
	}()...)
	t := w.nextDomain
	add("TOASTed child inserted", w.insertDomain(1, true))
	add("TOASTed child: update of another column (unavailable value)", w.priceOnly(t))
	add("TOASTed child: foreign-key move without its value", w.moveDomain(t, 3))
	add("TOASTed child: parent renamed", w.renameUser(3))
	add("mixed multi-statement transaction", w.renameUser(1), w.moveDomain(t, 1), w.newUser(), w.insertDomain(w.nextUser-1, false), w.deleteDomain(dc+1))
	add("delete then re-insert the same child in one transaction", func() []Stmt {
		id, _ := w.anyDomain(true)
		u := w.domains[id].user
		return []Stmt{w.deleteDomain(id), w.insertDomainID(id, u, false)}
	}()...)
	return txs
}

// HotUser creates the hot user with HotDomains domains in one statement.
func (w *Workload) HotUser() Tx {
	w.hot = w.nextUser
	ins := w.newUser()
	first := w.nextDomain
	n := int64(w.size.HotDomains)
	for id := first; id < first+n; id++ {
		w.domains[id] = domain{user: w.hot}
	}
	w.nextDomain += n
	return Tx{Name: fmt.Sprintf("hot user %d with %d domains", w.hot, n), Stmts: []Stmt{ins, {
		`INSERT INTO domains (id, user_id, domain_name, registered_at, price) SELECT g, $1, 'hot-' || g || '.example', now(), 1.00 FROM generate_series($2::bigint, $3::bigint) g`,
		[]any{w.hot, first, first + n - 1}}}}
}

// HotRename renames the hot user: one source change, HotDomains output rows.
func (w *Workload) HotRename() Tx {
	u := w.users[w.hot]
	u.first = strp(fmt.Sprintf("Hot-%d", w.rng.IntN(1000000)))
	w.users[w.hot] = u
	return Tx{Name: "rename hot user", Stmts: []Stmt{{`UPDATE users SET firstname = $2 WHERE id = $1`, []any{w.hot, u.first}}}}
}

// Random returns n random transactions of 1–4 statements each.
func (w *Workload) Random(n int) []Tx {
	txs := make([]Tx, 0, n)
	for i := 0; i < n; i++ {
		k := 1 + w.rng.IntN(4)
		tx := Tx{}
		for j := 0; j < k; j++ {
			if s, ok := w.randomStmt(); ok {
				tx.Stmts = append(tx.Stmts, s)
			}
		}
		if len(tx.Stmts) > 0 {
			txs = append(txs, tx)
		}
	}
	return txs
}

func (w *Workload) randomStmt() (Stmt, bool) {
	switch r := w.rng.IntN(100); {
	case r < 12:
		return w.newUser(), true
	case r < 30:
		return w.insertDomain(w.targetUser(), w.rng.IntN(25) == 0), true
	case r < 45:
		if id, ok := w.anyUser(false); ok && id != w.hot {
			return w.renameUser(id), true
		}
	case r < 57:
		if id, ok := w.anyDomain(true); ok {
			return w.renameDomain(id), true
		}
	case r < 67:
		if id, ok := w.anyDomain(true); ok {
			return w.moveDomain(id, w.targetUser()), true
		}
	case r < 75:
		if id, ok := w.anyDomain(true); ok {
			return w.deleteDomain(id), true
		}
	case r < 80:
		if id, ok := w.anyUser(true); ok {
			return w.deleteUser(id), true
		}
	case r < 83:
		if len(w.deleted) > 0 {
			i := w.rng.IntN(len(w.deleted))
			id := w.deleted[i]
			w.deleted = append(w.deleted[:i], w.deleted[i+1:]...)
			if _, exists := w.users[id]; !exists {
				return w.insertUser(id), true
			}
		}
	case r < 87:
		if id, ok := w.anyUser(true); ok {
			return w.rekeyUser(id), true
		}
	case r < 90:
		if id, ok := w.anyDomain(true); ok {
			return w.rekeyDomain(id), true
		}
	case r < 96:
		if id, ok := w.anyDomain(true); ok {
			return w.priceOnly(id), true
		}
	default:
		if id, ok := w.anyUser(false); ok {
			return Stmt{`UPDATE domains SET domain_name = domain_name || '.x' WHERE user_id = $1`, []any{id}}, true
		}
	}
	return Stmt{}, false
}

// Marker is the final transaction: a change outside the join's projection
// on MarkerUser and MarkerDomain, so that its transaction id shows up in
// both Debezium topics after everything else. The caller reads the
// transaction id with txid_current() inside it.
func (w *Workload) Marker(n int) Tx {
	return Tx{Name: "end marker", Stmts: []Stmt{
		{`UPDATE users SET email = $2 WHERE id = $1`, []any{int64(MarkerUser), fmt.Sprintf("marker-%d@example.com", n)}},
		w.priceOnly(MarkerDomain),
	}}
}

// Expected returns the rows the model predicts for the join (left: LEFT
// JOIN) without names, as (user_id, domain_id) pairs with domain_id -1 for
// a padded row. Tests use it to check the model against PostgreSQL.
func (w *Workload) Expected(left bool) [][2]int64 {
	var out [][2]int64
	has := map[int64]bool{}
	for _, id := range sortedKeys(w.domains) {
		d := w.domains[id]
		if _, ok := w.users[d.user]; ok {
			out = append(out, [2]int64{d.user, id})
			has[d.user] = true
		}
	}
	if left {
		for _, id := range sortedKeys(w.users) {
			if !has[id] {
				out = append(out, [2]int64{id, -1})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out
}
