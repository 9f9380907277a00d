package cdcgen

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// SchemaMode says whether records are written by a JsonConverter with
// schemas.enable=true ({"schema":…,"payload":…}) or false (bare envelope).
type SchemaMode uint8

// Schema modes. The zero value is SchemaOn.
const (
	SchemaOn    SchemaMode = iota // every record carries its schema block
	SchemaOff                     // bare key and envelope
	SchemaMixed                   // chosen per record at random (key and value together)
)

// ReplicaIdentity is a table's PostgreSQL REPLICA IDENTITY, which decides
// what Debezium puts in `before`.
type ReplicaIdentity uint8

// Replica identities.
const (
	// ReplicaAuto picks the package default: FULL for users, DEFAULT for domains.
	ReplicaAuto ReplicaIdentity = iota
	// ReplicaDefault: update events have before=null; delete events carry
	// only the key columns in before (the other columns are null).
	ReplicaDefault
	// ReplicaFull: before is the complete old row.
	ReplicaFull
)

// Interleave says how the records produced during one round (all topics and
// partitions) are merged into the single consumption order. Every mode keeps
// each partition's own order.
type Interleave uint8

// Interleave modes. The zero value is InterleaveRandom.
const (
	// InterleaveRandom: a uniformly random merge of the partitions' sequences.
	InterleaveRandom Interleave = iota
	// InterleaveBursty: runs of 1..64 records from one randomly chosen partition.
	InterleaveBursty
	// InterleaveProduction: the order in which records were produced (DB order).
	InterleaveProduction
	// InterleaveParentFirst: all of the round's parent-topic records, then the child's.
	InterleaveParentFirst
	// InterleaveChildFirst: all of the round's child-topic records, then the parent's.
	InterleaveChildFirst
)

// TimestampType is the Debezium type of users.created_at.
type TimestampType uint8

// Timestamp types. The zero value is ZonedTimestamp.
const (
	// ZonedTimestamp: timestamptz, a string with the
	// io.debezium.time.ZonedTimestamp logical name ("2024-01-02T03:04:05.123Z").
	ZonedTimestamp TimestampType = iota
	// MicroTimestamp: timestamp (without time zone), int64 microseconds with
	// the io.debezium.time.MicroTimestamp logical name.
	MicroTimestamp
)

// Mix holds the relative weights of the streaming operations. An operation
// that is impossible at the moment it is drawn (e.g. an update when the table
// is empty) falls back to an insert. A zero Mix means DefaultMix().
type Mix struct {
	InsertUser           int // INSERT a user with a fresh id
	InsertDomain         int // INSERT a domain owned by an existing user
	UpdateUserSelected   int // UPDATE users SET firstname, lastname (projected columns)
	UpdateUserUnselected int // UPDATE users SET email, balance, created_at, pads (never projected)
	UpdateDomain         int // UPDATE domains SET domain_name, price, pads
	MoveDomain           int // UPDATE domains SET user_id (FK move to another existing user)
	DeleteUser           int // DELETE a user (its domains stay: the FK has no constraint)
	DeleteDomain         int // DELETE a domain
	PKChangeUser         int // UPDATE users SET id = <fresh id>: delete(old) + tombstone + create(new)
	PKChangeDomain       int // UPDATE domains SET id = <fresh id>
	TruncateUsers        int // TRUNCATE users
	TruncateDomains      int // TRUNCATE domains
	RecreateUser         int // INSERT a user with the id of a previously deleted user
	OrphanDomain         int // INSERT a domain whose user_id does not exist yet (created soon after)
}

// DefaultMix is the operation mix used for correctness testing: every kind
// of operation occurs many times in a 20,000-operation history, truncates
// about ten times per table.
func DefaultMix() Mix {
	return Mix{
		InsertUser: 1200, InsertDomain: 2200, UpdateUserSelected: 1000, UpdateUserUnselected: 900,
		UpdateDomain: 1100, MoveDomain: 1000, DeleteUser: 400, DeleteDomain: 700,
		PKChangeUser: 200, PKChangeDomain: 200, TruncateUsers: 5, TruncateDomains: 5,
		RecreateUser: 300, OrphanDomain: 300,
	}
}

func (m Mix) weights() [numOpKinds]int {
	return [numOpKinds]int{
		opInsertUser: m.InsertUser, opInsertDomain: m.InsertDomain,
		opUpdateUserSel: m.UpdateUserSelected, opUpdateUserUnsel: m.UpdateUserUnselected,
		opUpdateDomain: m.UpdateDomain, opMoveDomain: m.MoveDomain,
		opDeleteUser: m.DeleteUser, opDeleteDomain: m.DeleteDomain,
		opPKUser: m.PKChangeUser, opPKDomain: m.PKChangeDomain,
		opTruncUsers: m.TruncateUsers, opTruncDomains: m.TruncateDomains,
		opRecreateUser: m.RecreateUser, opOrphanDomain: m.OrphanDomain,
	}
}

// Options configures a generated history. The zero value of every field is
// valid and means "off" or the documented default; DefaultOptions turns all
// hard cases on.
type Options struct {
	// Seed makes the history deterministic: the same Options give the same
	// records, byte for byte.
	Seed int64
	// Ops is the number of streaming DB operations after the snapshot. One
	// operation is one statement (an insert, an update, …); consecutive
	// operations are grouped into transactions of up to MaxTxOps.
	Ops int
	// Users and Domains are the initial row counts, emitted as a snapshot
	// (op=r) before streaming starts. Domain owners are drawn like later ones.
	Users, Domains int
	// ParentTopic and ChildTopic default to dbserver1.public.users and
	// dbserver1.public.domains. A topic of the form <server>.<schema>.<table>
	// also names the source block's name, schema and table.
	ParentTopic, ChildTopic string
	// Partitions per topic (default 1). Records are partitioned like Kafka's
	// default partitioner: murmur2(key bytes) % Partitions, where the key bytes
	// are the schemaless key ({"id":N}) whatever the record's schema mode, so
	// all records of a row land on one partition. A truncate (null key) goes to
	// a random partition.
	Partitions int
	// SchemaMode selects schemas on, off or mixed per record.
	SchemaMode SchemaMode
	// UsersIdentity and DomainsIdentity are the tables' replica identities
	// (ReplicaAuto: users FULL, domains DEFAULT).
	UsersIdentity, DomainsIdentity ReplicaIdentity
	// Mix weights the streaming operations (zero: DefaultMix()).
	Mix Mix
	// Toast is the probability that a text column whose value did not change
	// in an update is sent as "__debezium_unavailable_value" in after.
	Toast float64
	// Redeliver is the probability, per round, of a connector restart at the
	// end of the round: Debezium re-sends, with new offsets and the same bytes,
	// every record of the round produced after a random restart point, on every
	// partition (at-least-once delivery). Each partition's re-sent suffix ends
	// with its latest record, so state converges by the round's checkpoint.
	Redeliver float64
	// SnapshotRerun makes the snapshot fail after a random prefix and run
	// again in full: the prefix's records appear twice (same bytes, same
	// source position), then streaming continues.
	SnapshotRerun bool
	// Tombstones emits a tombstone (same key, null value) after every delete
	// (Debezium's tombstones.on.delete=true).
	Tombstones bool
	// Interleave selects how a round's records are merged for consumption.
	Interleave Interleave
	// MaxRoundOps bounds the number of operations in one round, i.e. between
	// two checkpoints (default 64). Each round has 1..MaxRoundOps operations.
	MaxRoundOps int
	// SnapshotChunk is the number of snapshot records per interleaving chunk
	// (default 4096). Snapshot chunks are not checkpoints: the only
	// checkpoint in the snapshot is at its end.
	SnapshotChunk int
	// MaxTxOps bounds the operations per transaction (default 1). With more,
	// transactions share txId and commit; their changes have increasing LSNs.
	MaxTxOps int
	// LSNInterleave is the probability that a transaction started before the
	// previous one committed, so its change LSNs are lower than the previous
	// transaction's although it commits later (source.sequence stays ordered).
	LSNInterleave float64
	// CreatedAt selects the Debezium type of users.created_at.
	CreatedAt TimestampType
	// UserPads and DomainPads add text columns pad_1..pad_N to the tables,
	// each PadBytes long (default 16 when pads exist): wide rows whose extra
	// columns are never projected. At most 1000 each.
	UserPads, DomainPads int
	PadBytes             int
	// ParentSkew, when > 1, draws the user of a new or moved domain (and the
	// user of user updates) from a Zipf(ParentSkew) over user ids, so low ids
	// become hot parents. 0 means uniform over live users.
	ParentSkew float64
	// IDBase (>= 0) is added to every id and user_id value, so generators
	// with different seeds and IDBase values far apart (e.g. i<<40) produce
	// disjoint rows and can run in parallel; the union of their histories is
	// a valid history (each keeps its own partition offsets, though: merge
	// them through a real producer, not by concatenation).
	IDBase int64
}

// DefaultOptions returns the options used by correctness tests: 20,000
// operations, 200 users and 400 domains snapshotted, 3 partitions per topic,
// mixed schemas, every hard case of NOTES §3 enabled.
func DefaultOptions(seed int64) Options {
	return Options{
		Seed: seed, Ops: 20000, Users: 200, Domains: 400, Partitions: 3,
		SchemaMode: SchemaMixed, Mix: DefaultMix(), Toast: 0.3, Redeliver: 0.1,
		SnapshotRerun: true, Tombstones: true, MaxTxOps: 3, LSNInterleave: 0.05,
		UserPads: 2, DomainPads: 1, PadBytes: 12,
	}
}

// Default topic names.
const (
	DefaultParentTopic = "dbserver1.public.users"
	DefaultChildTopic  = "dbserver1.public.domains"
)

// withDefaults returns o with zero fields replaced by their defaults.
func (o Options) withDefaults() Options {
	if o.ParentTopic == "" {
		o.ParentTopic = DefaultParentTopic
	}
	if o.ChildTopic == "" {
		o.ChildTopic = DefaultChildTopic
	}
	if o.Partitions == 0 {
		o.Partitions = 1
	}
	if o.Mix == (Mix{}) {
		o.Mix = DefaultMix()
	}
	if o.UsersIdentity == ReplicaAuto {
		o.UsersIdentity = ReplicaFull
	}
	if o.DomainsIdentity == ReplicaAuto {
		o.DomainsIdentity = ReplicaDefault
	}
	if o.MaxRoundOps == 0 {
		o.MaxRoundOps = 64
	}
	if o.SnapshotChunk == 0 {
		o.SnapshotChunk = 4096
	}
	if o.MaxTxOps == 0 {
		o.MaxTxOps = 1
	}
	if o.PadBytes == 0 && (o.UserPads > 0 || o.DomainPads > 0) {
		o.PadBytes = 16
	}
	return o
}

// validate reports every problem with o (after defaults) at once.
func (o Options) validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if o.Ops < 0 || o.Users < 0 || o.Domains < 0 {
		bad("Ops, Users and Domains must be >= 0 (got %d, %d, %d)", o.Ops, o.Users, o.Domains)
	}
	if o.ParentTopic == o.ChildTopic {
		bad("ParentTopic and ChildTopic must differ (both %q)", o.ParentTopic)
	}
	if o.Partitions < 1 || o.Partitions > 1<<16 {
		bad("Partitions must be in 1..65536 (got %d)", o.Partitions)
	}
	if o.SchemaMode > SchemaMixed {
		bad("unknown SchemaMode %d", o.SchemaMode)
	}
	if o.UsersIdentity > ReplicaFull || o.DomainsIdentity > ReplicaFull {
		bad("unknown ReplicaIdentity")
	}
	if o.Interleave > InterleaveChildFirst {
		bad("unknown Interleave %d", o.Interleave)
	}
	if o.CreatedAt > MicroTimestamp {
		bad("unknown CreatedAt type %d", o.CreatedAt)
	}
	for name, p := range map[string]float64{"Toast": o.Toast, "Redeliver": o.Redeliver, "LSNInterleave": o.LSNInterleave} {
		if !(p >= 0 && p <= 1) {
			bad("%s must be a probability in [0,1] (got %v)", name, p)
		}
	}
	w := o.Mix.weights()
	total := 0
	for _, x := range w {
		if x < 0 {
			bad("Mix weights must be >= 0")
			break
		}
		total += x
	}
	if total <= 0 && o.Ops > 0 {
		bad("Mix has no positive weight")
	}
	if o.MaxRoundOps < 1 || o.SnapshotChunk < 1 || o.MaxTxOps < 1 {
		bad("MaxRoundOps, SnapshotChunk and MaxTxOps must be >= 1")
	}
	if o.UserPads < 0 || o.UserPads > 1000 || o.DomainPads < 0 || o.DomainPads > 1000 {
		bad("UserPads and DomainPads must be in 0..1000")
	}
	if o.PadBytes < 0 || o.PadBytes > 4096 {
		bad("PadBytes must be in 0..4096 (got %d)", o.PadBytes)
	}
	if o.IDBase < 0 || o.IDBase > 1<<62 {
		bad("IDBase must be in 0..2^62 (got %d)", o.IDBase)
	}
	if o.ParentSkew != 0 && !(o.ParentSkew > 1) {
		bad("ParentSkew must be 0 (uniform) or > 1 (got %v)", o.ParentSkew)
	}
	if len(errs) == 0 {
		return nil
	}
	slices.Sort(errs)
	return errors.New("cdcjoin: cdcgen: invalid options: " + strings.Join(errs, "; "))
}
