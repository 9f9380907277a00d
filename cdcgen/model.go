package cdcgen

import (
	"strconv"
	"time"
)

// User is one row of the users table as the oracle sees it (pad columns are
// left out: they are never projected).
type User struct {
	ID        int64
	FirstName string
	LastName  string
	Email     string
	Balance   string // numeric(12,2) in canonical text, e.g. "-1234.05"
	CreatedAt int64  // microseconds since the Unix epoch, UTC
}

// Domain is one row of the domains table as the oracle sees it.
type Domain struct {
	ID         int64
	UserID     int64
	DomainName string
	Price      string // numeric(10,2) in canonical text
}

// Tables is a DB state: both tables keyed by primary key.
type Tables struct {
	Users   map[int64]User
	Domains map[int64]Domain
}

// Row contents are a pure function of (id, version counters), so the
// generator keeps only a few integers per row and can model 10^8 rows.

// mix hashes three numbers into 64 well-mixed bits (splitmix64 finalizer).
func mix(a, b, c uint64) uint64 {
	x := a*0x9E3779B97F4A7C15 ^ b*0xC2B2AE3D27D4EB4F ^ c*0x165667B19E3779F9
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}

// Distinct names; some need JSON escaping or are multi-byte UTF-8.
var firstNames = [...]string{
	"Egor", "Pavel", "Mitya", "Anna", "Olga", "Ivan", "Maria", "Sergei", "Elena", "Dmitri",
	"Zoë", "José", "Chloé", "Søren", "Łukasz", "Ángel", "Quo\"ted", "Tab\tby", "Back\\slash",
	"明", "Ahmed", "Priya", "Jean-Luc", "D'Arcy",
}

var lastNames = [...]string{
	"Myasnik", "Hvastun", "Volk", "Ivanova", "Petrov", "Smirnov", "Kuznetsov", "Popova",
	"O'Brien", "Müller", "Ñúñez", "Ørsted", "van der Berg", "Line\nBreak", "Ctrl\x01Char",
	"Emoji😀", "日本", "Straße", "Nguyễn", "Slash/Es", "Lovelace", "Hopper", "Knuth", "Dijkstra",
}

var domainWords = [...]string{
	"approval", "rejection", "stoppage", "cancellation", "bücher", "shop", "mail", "cloud",
	"data", "stream", "join", "kafka", "pebble", "house", "click", "river", "stone", "forest",
}

var tlds = [...]string{"com", "org", "net", "io", "dev", "ru", "de", "рф"}

const (
	saltFirst = iota + 1
	saltLast
	saltBalance
	saltCreated
	saltDomainWord
	saltDomainNum
	saltDomainTLD
	saltPrice
	saltPad = 1000
)

func userFirst(id int64, sel uint32) int {
	return int(mix(uint64(id), uint64(sel), saltFirst) % uint64(len(firstNames)))
}

func userLast(id int64, sel uint32) int {
	return int(mix(uint64(id), uint64(sel), saltLast) % uint64(len(lastNames)))
}

// appendEmail appends the email of user id at unselected version uns.
func appendEmail(b []byte, id int64, uns uint32) []byte {
	b = append(b, "user"...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(uns), 10)
	return append(b, "@example.com"...)
}

// userBalance is the unscaled (cents) balance: -10,000,000.00 .. 10,000,000.00.
func userBalance(id int64, uns uint32) int64 {
	return int64(mix(uint64(id), uint64(uns), saltBalance)%2_000_000_001) - 1_000_000_000
}

var createdBase = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// userCreatedAt is a microsecond timestamp in 2020..2025; some have a whole
// second or whole millisecond to exercise trimmed fractions.
func userCreatedAt(id int64, uns uint32) int64 {
	h := mix(uint64(id), uint64(uns), saltCreated)
	us := createdBase + int64(h>>8)%(5*365*86400*1_000_000)
	switch h & 7 {
	case 0:
		us -= us % 1_000_000
	case 1:
		us -= us % 1000
	}
	return us
}

type domainName struct{ word, num, tld uint32 }

func domainNameOf(id int64, ver uint32) domainName {
	return domainName{
		word: uint32(mix(uint64(id), uint64(ver), saltDomainWord) % uint64(len(domainWords))),
		num:  uint32(mix(uint64(id), uint64(ver), saltDomainNum) % 1000),
		tld:  uint32(mix(uint64(id), uint64(ver), saltDomainTLD) % uint64(len(tlds))),
	}
}

func (d domainName) appendTo(b []byte) []byte {
	b = append(b, domainWords[d.word]...)
	b = append(b, '-')
	b = strconv.AppendUint(b, uint64(d.num), 10)
	b = append(b, '.')
	return append(b, tlds[d.tld]...)
}

// domainPrice is the unscaled price: 0.00 .. 99,999.99.
func domainPrice(id int64, ver uint32) int64 {
	return int64(mix(uint64(id), uint64(ver), saltPrice) % 10_000_000)
}

// padOffset picks the pad value of column k as an offset into the pad text.
func padOffset(id int64, ver uint32, k int, span int) int {
	if span <= 0 {
		return 0
	}
	return int(mix(uint64(id), uint64(ver), uint64(saltPad+k)) % uint64(span))
}

// appendDecimalText renders unscaled/10^scale canonically ("-0.05").
func appendDecimalText(b []byte, unscaled int64, scale int) []byte {
	u := uint64(unscaled)
	if unscaled < 0 {
		b = append(b, '-')
		u = uint64(-unscaled)
	}
	digits := strconv.AppendUint(nil, u, 10)
	for len(digits) <= scale {
		digits = append([]byte{'0'}, digits...)
	}
	b = append(b, digits[:len(digits)-scale]...)
	if scale > 0 {
		b = append(b, '.')
		b = append(b, digits[len(digits)-scale:]...)
	}
	return b
}

func renderUser(id int64, sel, uns uint32) User {
	return User{
		ID:        id,
		FirstName: firstNames[userFirst(id, sel)],
		LastName:  lastNames[userLast(id, sel)],
		Email:     string(appendEmail(nil, id, uns)),
		Balance:   string(appendDecimalText(nil, userBalance(id, uns), 2)),
		CreatedAt: userCreatedAt(id, uns),
	}
}

func renderDomain(id int64, ver uint32, user int64) Domain {
	return Domain{
		ID:         id,
		UserID:     user,
		DomainName: string(domainNameOf(id, ver).appendTo(nil)),
		Price:      string(appendDecimalText(nil, domainPrice(id, ver), 2)),
	}
}

// liveSet is the set of live ids of a table: a dense position index plus a
// list, for O(1) insert, delete, membership and uniform random choice.
type liveSet struct {
	pos []int32 // per id: index into ids, -1 when absent
	ids []int64
}

func (l *liveSet) grow(id int64) {
	for int64(len(l.pos)) <= id {
		l.pos = append(l.pos, -1)
	}
}

func (l *liveSet) has(id int64) bool {
	return id > 0 && id < int64(len(l.pos)) && l.pos[id] >= 0
}

func (l *liveSet) add(id int64) {
	l.grow(id)
	if l.pos[id] < 0 {
		l.pos[id] = int32(len(l.ids))
		l.ids = append(l.ids, id)
	}
}

func (l *liveSet) remove(id int64) {
	p := l.pos[id]
	last := l.ids[len(l.ids)-1]
	l.ids[p] = last
	l.pos[last] = p
	l.ids = l.ids[:len(l.ids)-1]
	l.pos[id] = -1
}

func (l *liveSet) clear() {
	for _, id := range l.ids {
		l.pos[id] = -1
	}
	l.ids = l.ids[:0]
}

// state is the generator's current DB: per-id version counters (row
// contents derive from them) and the live sets.
type state struct {
	uSel, uUns   []uint32 // per user id: selected / unselected column versions
	users        liveSet
	dVer         []uint32
	dUser        []int64
	domains      liveSet
	nextUser     int64 // smallest user id never used
	nextDomain   int64
	deletedUsers []int64 // ids of deleted users, candidates for re-creation
}

func newState() *state { return &state{nextUser: 1, nextDomain: 1} }

func (s *state) growUsers(id int64) {
	for int64(len(s.uSel)) <= id {
		s.uSel = append(s.uSel, 0)
		s.uUns = append(s.uUns, 0)
	}
	s.users.grow(id)
	s.nextUser = max(s.nextUser, id+1)
}

func (s *state) growDomains(id int64) {
	for int64(len(s.dVer)) <= id {
		s.dVer = append(s.dVer, 0)
		s.dUser = append(s.dUser, 0)
	}
	s.domains.grow(id)
	s.nextDomain = max(s.nextDomain, id+1)
}

// putUser makes user id live with the given versions.
func (s *state) putUser(id int64, sel, uns uint32) {
	s.growUsers(id)
	s.uSel[id], s.uUns[id] = sel, uns
	s.users.add(id)
}

func (s *state) putDomain(id int64, ver uint32, user int64) {
	s.growDomains(id)
	s.dVer[id], s.dUser[id] = ver, user
	s.domains.add(id)
}

// tables renders the current state, ids shifted by base.
func (s *state) tables(base int64) Tables {
	t := Tables{Users: make(map[int64]User, len(s.users.ids)), Domains: make(map[int64]Domain, len(s.domains.ids))}
	for _, id := range s.users.ids {
		putUserRow(t, base, renderUser(id, s.uSel[id], s.uUns[id]))
	}
	for _, id := range s.domains.ids {
		putDomainRow(t, base, renderDomain(id, s.dVer[id], s.dUser[id]))
	}
	return t
}

// mutation is one entry of the ground-truth DB log kept by Generate.
type mutation struct {
	kind mutKind
	id   int64
	a, b uint32 // users: sel, uns; domains: ver
	user int64  // domains: user_id
}

type mutKind uint8

const (
	mutPutUser mutKind = iota + 1
	mutDelUser
	mutPutDomain
	mutDelDomain
	mutTruncUsers
	mutTruncDomains
)

// replay applies log to empty tables, ids shifted by base.
func replay(log []mutation, base int64) Tables {
	t := Tables{Users: map[int64]User{}, Domains: map[int64]Domain{}}
	for _, m := range log {
		switch m.kind {
		case mutPutUser:
			putUserRow(t, base, renderUser(m.id, m.a, m.b))
		case mutDelUser:
			delete(t.Users, m.id+base)
		case mutPutDomain:
			putDomainRow(t, base, renderDomain(m.id, m.a, m.user))
		case mutDelDomain:
			delete(t.Domains, m.id+base)
		case mutTruncUsers:
			clear(t.Users)
		case mutTruncDomains:
			clear(t.Domains)
		}
	}
	return t
}

// putUserRow and putDomainRow store a rendered row (generator-local ids)
// under its global ids.
func putUserRow(t Tables, base int64, u User) {
	u.ID += base
	t.Users[u.ID] = u
}

func putDomainRow(t Tables, base int64, d Domain) {
	d.ID += base
	d.UserID += base
	t.Domains[d.ID] = d
}
