-- deploy/local/e2e-alter.sql: source schema changes while the e2e runs
-- (e2e/cmd/cdcjoin-e2e -alter; applied after cdcjoin restarted, while the
-- workload goes on). One transaction per statement; statements on the type
-- tables run only when every typed config reads schemas (the Avro pass: a
-- config without schemas declares types, which the operator would update
-- first). Each change must be carried on: the
-- comparison with PostgreSQL's join at the end covers them.

-- ADD COLUMN, not selected by any join: ignored (a new schema version)
ALTER TABLE users ADD COLUMN nickname text;
UPDATE users SET nickname = 'nick-' || id, firstname = firstname || '+' WHERE id % 7 = 0;

-- a new NOT NULL column with a default, not selected
ALTER TABLE domains ADD COLUMN flag integer NOT NULL DEFAULT 0;
UPDATE domains SET flag = 1, domain_name = domain_name || '.alt' WHERE id % 11 = 0;
INSERT INTO domains (id, user_id, domain_name, flag) SELECT 900000 + id, id, 'added-' || id, 2 FROM users WHERE id % 13 = 0;

-- widening of selected columns: integer -> bigint, numeric(12,4) ->
-- numeric(18,4), varchar(40) -> text; then values only the wider types hold
-- (ClickHouse's Int32 and Decimal(12, 4) columns are widened by cdcjoin)
ALTER TABLE type_parents ALTER COLUMN i4 TYPE bigint, ALTER COLUMN num TYPE numeric(18,4), ALTER COLUMN vc TYPE text;
INSERT INTO type_parents (id, i4, num, vc, note) VALUES (100, 5000000000, 12345678901234.5678, repeat('a long varchar ', 10), 'widened');
UPDATE type_parents SET i4 = -6000000000, num = -99999999999999.9999 WHERE id = 1;
