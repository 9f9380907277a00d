// Package expr evaluates scalar expressions on rows of row.Values with
// PostgreSQL's semantics: the conditions of a query's ON and WHERE clauses
// and the expressions of its select list.
//
// What "PostgreSQL's semantics" means here, precisely:
//
//   - Three-valued logic: a comparison with a NULL operand is NULL
//     (unknown); AND is FALSE if any operand is FALSE, else NULL if any is
//     NULL; OR is TRUE if any operand is TRUE, else NULL if any is NULL;
//     NOT NULL is NULL. A filter keeps a row only when its condition is
//     TRUE (IsTrue). `x IN (a, b)` is `x = a OR x = b`, so `NULL IN (…)`
//     and `1 IN (2, NULL)` are NULL; `”` and `'NULL'` are strings, not
//     NULL.
//   - Comparisons: integers, decimals and floats compare numerically
//     across kinds (an integer or decimal against a float is compared as
//     float8, as PostgreSQL casts numeric to float8; NaN equals NaN and is
//     larger than every other float); text and bytea compare bytewise —
//     PostgreSQL's "C" collation, what the project's PostgreSQL clusters
//     use (initdb --no-locale) —; booleans false < true; dates, times and
//     timestamps by their value (a date against a timestamp as midnight
//     UTC). Other mixtures are errors, as PostgreSQL refuses them.
//   - A string literal ('2024-01-01', '42') is of unknown type and takes
//     the type of what it is compared with, as in PostgreSQL; alone it is
//     text.
//   - LIKE is case-sensitive; `%` matches any run of characters, `_` one
//     character, and a backslash escapes the next pattern character.
//   - Arithmetic (+ - * / %, unary -) on integers is exact and an overflow
//     of int64 is an error; on decimals exact (the result's scale is
//     PostgreSQL's: the larger scale for + and -, the sum for *; numeric
//     division is not supported); on floats IEEE. Division by zero is an
//     error. Integer division truncates toward zero.
//   - `||` concatenates text (an integer, decimal, boolean or date operand
//     is rendered as PostgreSQL renders it); a NULL operand gives NULL.
//     lower and upper change ASCII letters only (the "C" locale).
//   - COALESCE, CASE (searched and simple), IS [NOT] NULL, IS [NOT]
//     DISTINCT FROM, BETWEEN (as x >= a AND x <= b), NULLIF.
//
// Evaluation errors (a type mismatch PostgreSQL would refuse, an overflow,
// a division by zero) are returned; callers treat them as bad records.
// Expressions are immutable after construction and safe for concurrent
// use.
package expr
