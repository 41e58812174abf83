package pgstore

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// schema returns the statements that create the store's table and
// function, named after table (which may be schema-qualified, "s.t"), in
// an UNLOGGED table unless logged.
//
// The table holds one row a key and algorithm: k is the key, state the
// algorithm's state (both as package casstore encodes them), exp the
// instant, in µs of the server's clock, from which the row decides as a
// fresh key would and may be deleted (casstore.Store.Sweep). Only k is
// indexed, and fillfactor leaves half of each page free, so that a
// decision's UPDATE is a HOT update: a new row version on the same page,
// no index entry.
//
// The function is the store's casstore.Backend.Swap, and decides
// nothing: the client has run the algorithm's Go transition on the state
// it expected (olds[i], NULL for no row) at instant at (µs of the
// server's clock; 0 for requests at instants of their own), and the
// function writes news[i] (NULL: nothing to write) only if every row
// still holds what the client expected and at lies within lag µs before
// the server's clock. It locks the rows it will write in the order
// given, which the client sorts, so that batches never deadlock. It
// returns whether it wrote, the server's clock, and the rows' states as
// it found them, for the client to decide again on a mismatch.
func schema(table string, logged bool) (tbl, fn string, stmts []string) {
	parts := strings.Split(table, ".")
	tbl = pgx.Identifier(parts).Sanitize()
	parts[len(parts)-1] += "_apply"
	fn = pgx.Identifier(parts).Sanitize()
	unlogged := "UNLOGGED "
	if logged {
		unlogged = ""
	}
	return tbl, fn, []string{
		fmt.Sprintf(`CREATE %sTABLE IF NOT EXISTS %s (
	k bytea PRIMARY KEY,
	state bytea NOT NULL,
	exp bigint NOT NULL
) WITH (fillfactor = 50)`, unlogged, tbl),
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[2]s(keys bytea[], olds bytea[], news bytea[], exps bigint[], at bigint, lag bigint,
	OUT ok boolean, OUT clock bigint, OUT cur bytea[])
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
	n int := cardinality(keys);
	c bytea;
BEGIN
	clock := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
	ok := at = 0 OR at <= clock AND at >= clock - lag;
	cur := olds;
	-- Read every row, locking those to write, each at its latest version.
	FOR i IN 1..n LOOP
		IF ok AND news[i] IS NOT NULL THEN
			SELECT s.state INTO c FROM %[1]s s WHERE s.k = keys[i] FOR UPDATE;
		ELSE
			SELECT s.state INTO c FROM %[1]s s WHERE s.k = keys[i];
		END IF;
		IF NOT FOUND THEN
			c := NULL;
		END IF;
		cur[i] := c;
		ok := ok AND c IS NOT DISTINCT FROM olds[i];
	END LOOP;
	IF NOT ok THEN
		RETURN;
	END IF;
	-- New rows first: another caller may insert one meanwhile, and then
	-- the rows made so far are taken back before anything is updated.
	FOR i IN 1..n LOOP
		CONTINUE WHEN news[i] IS NULL OR olds[i] IS NOT NULL;
		INSERT INTO %[1]s (k, state, exp) VALUES (keys[i], news[i], exps[i]) ON CONFLICT (k) DO NOTHING;
		IF NOT FOUND THEN
			ok := false;
			cur[i] := (SELECT s.state FROM %[1]s s WHERE s.k = keys[i]);
			FOR j IN 1..i-1 LOOP
				IF news[j] IS NOT NULL AND olds[j] IS NULL THEN
					DELETE FROM %[1]s s WHERE s.k = keys[j];
				END IF;
			END LOOP;
			RETURN;
		END IF;
	END LOOP;
	FOR i IN 1..n LOOP
		CONTINUE WHEN news[i] IS NULL OR olds[i] IS NULL;
		UPDATE %[1]s s SET state = news[i], exp = exps[i] WHERE s.k = keys[i];
	END LOOP;
END
$fn$`, tbl, fn),
	}
}
