-- deploy/local/types-dml.sql: changes to the tables of types.sql, streamed
-- after the snapshot (capture-fixtures.sh, the e2e's typed phase). Each
-- statement is its own transaction. No psql meta-commands: the e2e driver
-- runs the file as one simple-protocol batch.

-- c: special floats, a pre-1970 date and timestamp, unicode and quoting
INSERT INTO type_parents VALUES
    (6, 7, 8, 9, 0.0001, 1e-20, 'Infinity', '-Infinity', true, E'line1\nline2\r\n\\N', 'ⅷ',
     '1969-12-31', '00:00:01', '1969-12-31 23:59:59.999999', '1955-11-05 06:15:00.5-07',
     '-00:00:00.000001', 'deadbeef-0000-4000-8000-000000000001', '{"k": "v\"q"}', '{"nested": {"deep": [true, false]}}',
     '\x0102', 'ok', '{-1,NULL}', '{"x y","z"}'),
    (7, 10, 11, 12, 3.1416, 1e20, '-Infinity', 'Infinity', false, '''', '"',
     '2000-01-01', '12:00:00', '2000-01-01 00:00:00', '2000-01-01 00:00:00+00',
     '1 mon', 'deadbeef-0000-4000-8000-000000000002', '"just a string"', '"just a string"',
     '\xffff', 'sad', '{7}', '{"seven"}');

-- c: a row with long, out-of-line (TOASTed) text, bytea, jsonb and arrays
INSERT INTO type_parents (id, i4, txt, b, jb, ai, at)
SELECT 8, 1,
       repeat('0123456789abcdef', 300),
       decode(repeat('00ff7f80', 1200), 'hex'),
       (SELECT jsonb_object_agg('k' || g, repeat('v', 8) || g) FROM generate_series(1, 300) g),
       (SELECT array_agg(g) FROM generate_series(1, 1500) g),
       (SELECT array_agg('elem-' || g) FROM generate_series(1, 600) g);

-- u: only i4 changes: txt, b, jb, ai and at are left unchanged and TOASTed,
-- so Debezium sends placeholders for them (REPLICA IDENTITY DEFAULT)
UPDATE type_parents SET i4 = 2 WHERE id = 8;
UPDATE type_parents SET i4 = 3, vc = 'changed' WHERE id = 8;

-- u: every column to NULL, then back to values
UPDATE type_parents SET i2 = NULL, i4 = NULL, i8 = NULL, num = NULL, num_free = NULL, f4 = NULL, f8 = NULL,
    ok = NULL, txt = NULL, vc = NULL, d = NULL, t = NULL, ts = NULL, tstz = NULL, iv = NULL, u = NULL,
    j = NULL, jb = NULL, b = NULL, m = NULL, ai = NULL, at = NULL WHERE id = 1;
UPDATE type_parents SET i2 = 11, num = 12.3400, num_free = -12.340, f4 = '-0', f8 = '-0', d = '1955-11-05',
    at = '{"back","again"}' WHERE id = 1;

-- children: a long (TOASTed) tags array and blob, then an update that
-- leaves them unchanged
INSERT INTO type_children
SELECT 'toast', 1, 8, 1.00, '1969-07-20',
       (SELECT array_agg('tag-' || g) FROM generate_series(1, 700) g),
       decode(repeat('cafe', 2000), 'hex'),
       (SELECT array_agg(('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid) FROM generate_series(1, 300) g),
       (SELECT array_agg('1969-07-20'::date + g) FROM generate_series(1, 1200) g);
UPDATE type_children SET amount = 2.00 WHERE region = 'toast' AND no = 1;

-- u: a foreign key move (child eu/1 from parent 1 to parent 6), with its
-- TOAST-free columns changing too
UPDATE type_children SET parent_id = 6, born = '1955-11-05' WHERE region = 'eu' AND no = 1;
-- the TOASTed child moves to parent 7 while its long columns stay untouched
UPDATE type_children SET parent_id = 7 WHERE region = 'toast' AND no = 1;

-- primary key change of a composite key: delete(old) + create(new)
UPDATE type_children SET no = 3 WHERE region = 'eu' AND no = 2;

-- d: a child, and a parent created for the purpose (parent 5, with its
-- NaNs, stays: a LEFT join row without children)
INSERT INTO type_parents (id, i4) VALUES (9, 9);
DELETE FROM type_children WHERE region = 'us' AND no = 2;
DELETE FROM type_parents WHERE id = 9;
