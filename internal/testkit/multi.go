package testkit

import (
	"fmt"
	"strings"

	"github.com/cdcjoin/cdcjoin/cdcgen"
)

// MultiQueries are the multi-table plans the oracles of both drivers run
// over cdcgen's Schema4 tables (engine TestMultiOracle, kafkarun
// TestPlanRunOracle): three- and four-table chains and stars,
// INNER/LEFT/RIGHT/FULL at each join, conditions in ON and WHERE, a
// many-to-many self-join on a non-key column.
var MultiQueries = map[string]string{
	"chain-inner-left": `SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name,
		r.id AS record_id, r.rtype, r.ttl
		FROM users u JOIN domains d ON d.user_id = u.id
		LEFT JOIN dns_records r ON r.domain_id = d.id AND r.rtype <> 'TXT'
		WHERE d.domain_name LIKE '%.com' AND u.lastname IS NOT NULL`,
	"chain-left-right": `SELECT u.id AS uid, u.firstname, d.id AS did, r.id AS rid, r.ttl
		FROM users u LEFT JOIN domains d ON d.user_id = u.id AND d.domain_name <> 'a.com'
		RIGHT JOIN dns_records r ON r.domain_id = d.id WHERE r.ttl IS NULL OR r.ttl > 300`,
	"chain-full-full": `SELECT u.id AS uid, u.lastname, d.id AS did, d.domain_name, r.id AS rid, r.rtype
		FROM users u FULL JOIN domains d ON d.user_id = u.id AND u.firstname <> 'Egor'
		FULL JOIN dns_records r ON r.domain_id = d.id AND r.rtype IN ('A', 'AAAA')`,
	"chain-right-left": `SELECT u.id AS uid, d.id AS did, r.id AS rid, upper(r.rtype) AS rt, coalesce(u.lastname, '?') || '/' || d.domain_name AS label
		FROM users u RIGHT JOIN domains d ON d.user_id = u.id LEFT JOIN dns_records r ON r.domain_id = d.id`,
	"star-inner-left": `SELECT d.id AS did, d.domain_name, u.id AS uid, u.firstname, g.id AS gid, g.name AS registrar
		FROM domains d JOIN users u ON u.id = d.user_id LEFT JOIN registrars g ON g.id = d.registrar_id`,
	"star-left-full": `SELECT d.id AS did, u.id AS uid, g.id AS gid, g.name AS registrar
		FROM domains d LEFT JOIN users u ON u.id = d.user_id FULL JOIN registrars g ON g.id = d.registrar_id AND g.name <> 'Gandi'
		WHERE u.lastname IS DISTINCT FROM 'x'`,
	"star-right-inner": `SELECT d.id AS did, u.id AS uid, u.lastname, g.id AS gid
		FROM domains d RIGHT JOIN users u ON u.id = d.user_id JOIN registrars g ON g.id = d.registrar_id`,
	"chain4": `SELECT u.id AS uid, d.id AS did, r.id AS rid, g.id AS gid, g.name AS registrar, r.rtype
		FROM users u JOIN domains d ON d.user_id = u.id
		LEFT JOIN dns_records r ON r.domain_id = d.id
		LEFT JOIN registrars g ON g.id = d.registrar_id WHERE r.rtype IS NULL OR r.rtype <> 'MX'`,
	"chain4-outer": `SELECT u.id AS uid, d.id AS did, r.id AS rid, g.id AS gid
		FROM users u FULL JOIN domains d ON d.user_id = u.id
		RIGHT JOIN dns_records r ON r.domain_id = d.id
		FULL JOIN registrars g ON g.id = d.registrar_id`,
	"many-to-many": `SELECT d.id AS did, d2.id AS did2, d.domain_name, r.id AS rid
		FROM domains d JOIN dns_records r ON r.domain_id = d.id
		LEFT JOIN domains d2 ON d2.user_id = d.user_id AND d2.domain_name LIKE '%.com'`,
}

// SQLJob returns the YAML of job name written as sql over the Schema4 tables
// it names (tables: and query:), for the caller to append its other
// sections to.
func SQLJob(name, sql string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ntables:\n", name)
	for _, tb := range cdcgen.Schema4() {
		if strings.Contains(sql, " "+tb.Name+" ") {
			fmt.Fprintf(&b, "  %s: {topic: %s, key: id}\n", tb.Name, tb.Topic())
		}
	}
	b.WriteString("query: |\n")
	for _, l := range strings.Split(sql, "\n") {
		b.WriteString("  " + strings.TrimSpace(l) + "\n")
	}
	return b.String()
}
