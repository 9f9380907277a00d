-- deploy/local/schema.sql: the example database of the local stack (database `shop`).
-- Applied once by `postgres.sh up` when it creates the database.
--
-- users has REPLICA IDENTITY FULL: Debezium's update/delete events carry the
-- complete before-image. domains keeps REPLICA IDENTITY DEFAULT: updates have
-- before = null and deletes carry only the primary key in before, so the join
-- must rely on its own state (NOTES.md hard case 3).
--
-- There is deliberately NO foreign key from domains.user_id to users.id: CDC
-- tests move domains between users, delete parents that still have children
-- and insert children before their parent, which a constraint would forbid;
-- the join must cope with all of these because real sources allow them
-- (no constraint, deferred constraints, or events consumed out of order).
--
-- users.bio and domains.domain_name are stored EXTERNAL (out of line, no
-- compression) so a long value (> ~2 KB) is TOASTed; an update that does not
-- touch it makes Debezium send `__debezium_unavailable_value` instead.

CREATE TABLE users (
    id         bigserial PRIMARY KEY,
    firstname  text,
    lastname   text,
    email      text,
    balance    numeric(12,2),
    created_at timestamptz DEFAULT now(),
    birthday   date,
    bio        text
);
ALTER TABLE users ALTER COLUMN bio SET STORAGE EXTERNAL;
ALTER TABLE users REPLICA IDENTITY FULL;

CREATE TABLE domains (
    id            bigserial PRIMARY KEY,
    user_id       bigint NOT NULL, -- no REFERENCES users(id): see above
    domain_name   text,
    registered_at timestamptz,
    price         numeric(10,2)
);
ALTER TABLE domains ALTER COLUMN domain_name SET STORAGE EXTERNAL;
ALTER TABLE domains REPLICA IDENTITY DEFAULT;
CREATE INDEX domains_user_id ON domains (user_id);

INSERT INTO users (id, firstname, lastname, email, balance, created_at, birthday) VALUES
    (1, 'Egor',  'Myasnik', 'egor@example.com',  1250.50, '2024-01-15 10:00:00+00', '1990-04-12'),
    (2, 'Pavel', 'Hvastun', 'pavel@example.com',    0.00, '2024-02-01 12:30:00+00', '1985-11-30'),
    (3, 'Mitya', 'Volk',    'mitya@example.com',  -42.75, '2024-03-20 08:15:00+00', NULL);
SELECT setval('users_id_seq', 3);

INSERT INTO domains (id, user_id, domain_name, registered_at, price) VALUES
    (1, 1, 'Approval',     '2024-01-16 09:00:00+00', 12.99),
    (2, 1, 'Rejection',    '2024-01-17 09:00:00+00',  9.50),
    (3, 1, 'Stoppage',     '2024-02-02 14:45:00+00', 100.00),
    (4, 3, 'Cancellation', '2024-03-21 18:00:00+00',  0.99);
SELECT setval('domains_id_seq', 4);

-- dns_records: the third table of the multi-table e2e job
-- (deploy/local/e2e-records.yaml: users ⋈ domains ⟕ dns_records with
-- conditions in ON and WHERE). REPLICA IDENTITY DEFAULT; domain_id is
-- nullable and has no REFERENCES: records move between domains, point at
-- domains that do not exist (yet), or at none.
CREATE TABLE dns_records (
    id        bigserial PRIMARY KEY,
    domain_id bigint,
    rtype     text,
    ttl       integer,
    value     text
);
ALTER TABLE dns_records REPLICA IDENTITY DEFAULT;
CREATE INDEX dns_records_domain_id ON dns_records (domain_id);

INSERT INTO dns_records (id, domain_id, rtype, ttl, value) VALUES
    (1, 1, 'A',   300,  '192.0.2.1'),
    (2, 1, 'TXT', 60,   'v=spf1 -all'),
    (3, 4, 'MX',  NULL, 'mx.example'),
    (4, NULL, 'A', 3600, '192.0.2.9');
SELECT setval('dns_records_id_seq', 4);
