-- deploy/local/fixture-dml.sql: the change script whose Debezium events
-- capture-fixtures.sh records into debezium/testdata/real/. Each step is its
-- own transaction unless grouped in BEGIN/COMMIT. Runs after the snapshot
-- (op=r) of the example rows of schema.sql.
\set ON_ERROR_STOP on

-- c: insert a user (FULL identity) with extreme decimals and sub-second timestamps, and a domain
INSERT INTO users (id, firstname, lastname, email, balance, created_at, birthday)
VALUES (4, 'Anna', 'Lisitsa', 'anna@example.com', 9999999999.99, '2024-05-01 00:00:00.123456+00', '2000-02-29');
INSERT INTO domains (id, user_id, domain_name, registered_at, price)
VALUES (5, 4, 'Approval', '2024-05-02 10:00:00.5+03', 0.01);

-- u on users (REPLICA IDENTITY FULL: before is the full old row)
UPDATE users SET firstname = 'Egorka' WHERE id = 1;

-- u on domains (REPLICA IDENTITY DEFAULT: before is null)
UPDATE domains SET price = 13.49 WHERE id = 1;

-- foreign key move: domain 2 from user 1 to user 3 (before is null)
UPDATE domains SET user_id = 3 WHERE id = 2;

-- multi-statement transaction: a transfer between two users
BEGIN;
UPDATE users SET balance = balance - 10.25 WHERE id = 1;
UPDATE users SET balance = balance + 10.25 WHERE id = 3;
COMMIT;

-- primary key change: Debezium emits d(old) + tombstone(old) + c(new)
UPDATE users SET id = 20 WHERE id = 2;
UPDATE domains SET id = 40 WHERE id = 4;

-- d + tombstone: domains (DEFAULT: before has only the key), users (FULL)
DELETE FROM domains WHERE id = 3;
DELETE FROM domains WHERE id = 5;
DELETE FROM users WHERE id = 4;

-- NULLs
UPDATE users SET email = NULL, birthday = NULL, balance = NULL WHERE id = 3;

-- TOAST: long out-of-line values, then updates that leave them untouched
UPDATE users SET bio = repeat('0123456789abcdef', 256) WHERE id = 3;
UPDATE users SET lastname = 'Volkov' WHERE id = 3;
INSERT INTO domains (id, user_id, domain_name, registered_at, price)
VALUES (6, 3, 'long-' || repeat('abcdefghij', 300) || '.example', '2024-06-01 12:00:00+00', 5.00);
UPDATE domains SET price = 6.00 WHERE id = 6;

-- t: truncate (the connectors set skipped.operations=none), then life goes on
TRUNCATE domains;
INSERT INTO domains (id, user_id, domain_name, registered_at, price)
VALUES (7, 1, 'Phoenix', '2024-07-01 00:00:00+00', -0.50);
