-- deploy/local/evolve-dml.sql: schema changes while Debezium streams, so
-- that the captured Avro records use several schema versions (new ids)
-- of one table (capture-avro-fixtures.sh). Runs after fixture-dml.sql.
\set ON_ERROR_STOP on

-- a new nullable column: a new value schema version for users
ALTER TABLE users ADD COLUMN nickname text;
INSERT INTO users (id, firstname, lastname, email, balance, created_at, birthday, nickname)
VALUES (7, 'Olga', 'Sova', 'olga@example.com', 7.00, '2024-07-07 07:07:07+00', '1977-07-07', 'owl');
UPDATE users SET nickname = 'egg' WHERE id = 1;

-- a widened column: numeric(10,2) -> numeric(14,4), a new schema for domains
ALTER TABLE domains ALTER COLUMN price TYPE numeric(14,4);
INSERT INTO domains (id, user_id, domain_name, registered_at, price)
VALUES (9, 7, 'Widened', '2024-07-08 08:00:00+00', 1234567890.1234);
UPDATE domains SET price = 0.0001 WHERE id = 1;

-- a dropped column: another users schema
ALTER TABLE users DROP COLUMN email;
UPDATE users SET lastname = 'Sovushkina' WHERE id = 7;
DELETE FROM users WHERE id = 7;
