-- deploy/local/types.sql: a parent and a child table covering the PostgreSQL
-- types people use, for the type-fidelity fixtures (capture-fixtures.sh) and
-- the typed phase of the real-stack e2e (e2e/cmd/cdcjoin-e2e). Applied to a
-- database that already has schema.sql; types-dml.sql changes the rows.
--
-- Both tables keep REPLICA IDENTITY DEFAULT and store their large columns
-- EXTERNAL (out of line, uncompressed), so an update that leaves a long
-- text, bytea, jsonb or array value untouched makes Debezium send its
-- unchanged-TOAST placeholder for it.

CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'it''s "quoted"');

CREATE TABLE type_parents (
    id       bigint PRIMARY KEY,
    i2       smallint,
    i4       integer,
    i8       bigint,
    num      numeric(12,4),
    num_free numeric,
    f4       real,
    f8       double precision,
    ok       boolean,
    txt      text,
    vc       varchar(40),
    d        date,
    t        time,
    ts       timestamp,
    tstz     timestamptz,
    iv       interval,
    u        uuid,
    j        json,
    jb       jsonb,
    b        bytea,
    m        mood,
    ai       integer[],
    at       text[],
    note     text    -- selected by no join: the e2e's end marker changes it
);
ALTER TABLE type_parents ALTER COLUMN txt SET STORAGE EXTERNAL;
ALTER TABLE type_parents ALTER COLUMN b SET STORAGE EXTERNAL;
ALTER TABLE type_parents ALTER COLUMN jb SET STORAGE EXTERNAL;
ALTER TABLE type_parents ALTER COLUMN ai SET STORAGE EXTERNAL;
ALTER TABLE type_parents ALTER COLUMN at SET STORAGE EXTERNAL;
ALTER TABLE type_parents REPLICA IDENTITY DEFAULT;

-- A composite primary key (text, integer) and a foreign key to
-- type_parents.id (no constraint: children move and outlive parents).
CREATE TABLE type_children (
    region    text    NOT NULL,
    no        integer NOT NULL,
    parent_id bigint  NOT NULL,
    amount    numeric(10,2),
    born      date,
    tags      text[],
    blob      bytea,
    ids       uuid[],
    days      date[],
    note      text,   -- selected by no join: the e2e's end marker changes it
    PRIMARY KEY (region, no)
);
ALTER TABLE type_children ALTER COLUMN tags SET STORAGE EXTERNAL;
ALTER TABLE type_children ALTER COLUMN blob SET STORAGE EXTERNAL;
ALTER TABLE type_children ALTER COLUMN ids SET STORAGE EXTERNAL;
ALTER TABLE type_children ALTER COLUMN days SET STORAGE EXTERNAL;
ALTER TABLE type_children REPLICA IDENTITY DEFAULT;

-- Snapshot rows (op=r): ordinary values, the extremes of each type, and a
-- row that is NULL in every nullable column.
INSERT INTO type_parents VALUES
    (1, 1, 2, 3, 1.5, 2.25, 1.5, 2.5, true, 'plain', 'varchar',
     '2024-02-29', '12:34:56.789012', '2024-02-29 12:34:56.789012', '2024-02-29 12:34:56.789012+00',
     '1 day 02:03:04.5', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.50, "x"]}', '{"b": 1, "a": "ü"}',
     '\x00ff10', 'happy', '{1,2,3}', '{"a","b"}'),
    (2, -32768, -2147483648, -9223372036854775808, -99999999.9999, -0.000000000000000000001, 1e-37, 5e-324, false,
     E'Zoë 日本 \U0001F600 ''single'' "double" back\\slash\ttab\nnewline', '',
     '1955-11-05', '00:00:00', '1955-11-05 06:15:00.000001', '1969-12-31 23:59:59.999999+00',
     '-1 years -2 mons +3 days -04:05:06.000007', '00000000-0000-0000-0000-000000000000', '[]', '{}',
     '\x', 'it''s "quoted"', '{}', '{}'),
    (3, 32767, 2147483647, 9223372036854775807, 99999999.9999, 123456789012345678901234567890.123456789,
     3.4028235e38, 1.7976931348623157e308, true, '', 'x',
     '2299-12-31', '23:59:59.999999', '2262-04-11 23:47:16.854775', '2262-04-11 23:47:16.854775+00',
     '100 years 11 mons 29 days 23:59:59.999999', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 'null', '[1, "two", null, {"three": 3.0}]',
     '\x5c27226e756c6c00', 'sad', '{-2147483648,NULL,2147483647}', '{NULL,"NULL","","a,b","q\"uote","back\\slash"}'),
    (4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (5, 0, 0, 0, 0, 0, 'NaN', 'NaN', false, 'nan', 'NaN',
     '1900-01-01', '00:00:00.000001', '1900-01-01 00:00:00', '1900-01-01 00:00:00+00',
     '0', '123e4567-e89b-12d3-a456-426614174000', '0', '0',
     '\x00', 'ok', '{0}', '{""}');

INSERT INTO type_children VALUES
    ('eu', 1, 1, 10.50, '1999-12-31', '{"x","y"}', '\xdeadbeef', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}', '{1955-11-05,NULL}'),
    ('eu', 2, 1, -0.01, '1900-01-01', '{}', '\x', '{}', '{}'),
    ('us', 1, 2, NULL, NULL, NULL, NULL, NULL, NULL),
    ('ü ''q''', 1, 3, 99999999.99, '2299-12-31', '{NULL,""}', '\x00', '{NULL}', '{2299-12-31}'),
    ('us', 2, 5, 0.00, '1970-01-01', '{"only"}', '\x01', '{00000000-0000-0000-0000-000000000000}', '{1970-01-01}');
