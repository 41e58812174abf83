package mysqlstore

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/casstore"
)

// DefaultTable is the table of a [Config] without one.
const DefaultTable = "sluice_state"

// Config configures a [Store]. The zero Config is ready to use.
type Config struct {
	// Table is the name of the table the store keeps its states in, in
	// the connection's database or qualified with another's ("limits" or
	// "app.limits"). The store's first call creates it if it does not
	// exist. The default is [DefaultTable].
	Table string
	// Config holds the kit's settings, each documented, with its
	// default, in [casstore.Config]: MaxLag, how far a decision's instant
	// may trail the server's clock; CacheKeys, how many keys' last known
	// states the store keeps; SweepInterval, how often it deletes the
	// rows of idle keys; and MaxSwaps, how many calls of the database it
	// has in flight at once (give the pool at least as many connections).
	casstore.Config
}

// Store keeps limiter state in a MariaDB or MySQL (InnoDB) table through
// a database/sql pool of go-sql-driver/mysql: a [casstore.Store] whose
// backend's compare-and-swap is a transaction. It is safe for concurrent
// use, and does not own its pool: Close does not close it.
type Store struct {
	*casstore.Store
}

var _ core.Store = (*Store)(nil)

// New returns a store on db, a pool of go-sql-driver/mysql. It does not
// reach the server: the store's first call creates its table if it does
// not exist (which needs the CREATE privilege), and a later call tries
// again if that failed.
func New(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysqlstore: nil pool")
	}
	tbl, err := quote(cmp.Or(cfg.Table, DefaultTable))
	if err != nil {
		return nil, err
	}
	s, err := casstore.New(&backend{db: db, tbl: tbl}, cfg.Config)
	if err != nil {
		return nil, err
	}
	return &Store{s}, nil
}

// quote returns table, whose parts are separated by dots, with each part
// quoted as an identifier.
func quote(table string) (string, error) {
	parts := strings.Split(table, ".")
	for i, p := range parts {
		if p == "" || strings.ContainsRune(p, 0) || len(p) > 64 {
			return "", fmt.Errorf("mysqlstore: invalid table name %q", table)
		}
		parts[i] = "`" + strings.ReplaceAll(p, "`", "``") + "`"
	}
	return strings.Join(parts, "."), nil
}

// backend is the store's [casstore.Backend]: the table, and a
// transaction for each Swap that writes.
//
// The table holds one row a key and algorithm: k the key, state the
// algorithm's state (both as package casstore encodes them; a key is at
// most 1024 bytes and its algorithm's name), exp the instant, in µs of
// the server's clock, from which the row may be deleted.
type backend struct {
	db    *sql.DB
	tbl   string         // the table's quoted name
	setup casstore.Setup // creates the table
}

// clock is the server's wall clock in µs since the Unix epoch. SYSDATE,
// unlike NOW, is read when evaluated: after the row's lock is taken.
const clock = "CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)"

// prepare creates the table on the backend's first call.
func (b *backend) prepare(ctx context.Context) error {
	return b.setup.Do(func() error {
		_, err := b.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+b.tbl+` (
	k VARBINARY(3072) NOT NULL PRIMARY KEY,
	state MEDIUMBLOB NOT NULL,
	exp BIGINT NOT NULL
) ENGINE = InnoDB`)
		if err != nil {
			return wrap("creating the table", err)
		}
		return nil
	})
}

// querier is a pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// read returns the states of keys, locking their rows if lock, and the
// server's clock.
func (b *backend) read(ctx context.Context, q querier, keys [][]byte, lock bool) ([][]byte, int64, error) {
	var sb strings.Builder
	sb.WriteString("SELECT k, state, " + clock + " FROM " + b.tbl + " WHERE k IN (?")
	sb.WriteString(strings.Repeat(", ?", len(keys)-1))
	sb.WriteString(")")
	if lock {
		sb.WriteString(" ORDER BY k FOR UPDATE")
	}
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rows, err := q.QueryContext(ctx, sb.String(), args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	cur := make([][]byte, len(keys))
	now := int64(0)
	for rows.Next() {
		var k, st []byte
		var c int64
		if err := rows.Scan(&k, &st, &c); err != nil {
			return nil, 0, err
		}
		for i := range keys {
			if bytes.Equal(keys[i], k) {
				cur[i] = st
			}
		}
		now = max(now, c)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if now == 0 { // no row: the clock alone
		if err := q.QueryRowContext(ctx, "SELECT "+clock).Scan(&now); err != nil {
			return nil, 0, err
		}
	}
	return cur, now, nil
}

// holds reports whether every key holds its expected state and the
// batch's instant lies within its lag before clock.
func holds(bt *casstore.Batch, cur [][]byte, clock int64) bool {
	if bt.At != 0 && (bt.At > clock || bt.At < clock-bt.Lag) {
		return false
	}
	for i := range cur {
		if (cur[i] == nil) != (bt.Old[i] == nil) || !bytes.Equal(cur[i], bt.Old[i]) {
			return false
		}
	}
	return true
}

// Swap reads the rows in one statement when the batch writes nothing (a
// denial, a peek). Otherwise it runs a transaction at READ COMMITTED, so
// that a key without a row takes no gap lock: it locks the rows in key
// order, checks them and the clock, inserts the new rows and updates the
// others. A new row another caller inserted meanwhile, or a deadlock,
// ends the transaction as a mismatch: the rows are read again and
// returned.
func (b *backend) Swap(ctx context.Context, bt *casstore.Batch) (casstore.Reply, error) {
	if err := b.prepare(ctx); err != nil {
		return casstore.Reply{}, err
	}
	writes := false
	for _, n := range bt.New {
		writes = writes || n != nil
	}
	if !writes {
		cur, now, err := b.read(ctx, b.db, bt.Keys, false)
		if err != nil {
			return casstore.Reply{}, wrap("deciding", err)
		}
		return casstore.Reply{Swapped: holds(bt, cur, now), Clock: now, Cur: cur}, nil
	}
	r, err := b.swap(ctx, bt)
	if conflict(err) {
		cur, now, err := b.read(ctx, b.db, bt.Keys, false)
		if err != nil {
			return casstore.Reply{}, wrap("deciding", err)
		}
		return casstore.Reply{Clock: now, Cur: cur}, nil
	}
	if err != nil {
		return casstore.Reply{}, wrap("deciding", err)
	}
	return r, nil
}

// swap is Swap's transaction.
func (b *backend) swap(ctx context.Context, bt *casstore.Batch) (casstore.Reply, error) {
	tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return casstore.Reply{}, err
	}
	defer tx.Rollback()
	cur, now, err := b.read(ctx, tx, bt.Keys, true)
	if err != nil {
		return casstore.Reply{}, err
	}
	if !holds(bt, cur, now) {
		return casstore.Reply{Clock: now, Cur: cur}, nil
	}
	// New rows with INSERT, which fails if another caller made one
	// meanwhile; rows locked above with INSERT … ON DUPLICATE KEY UPDATE.
	for _, fresh := range []bool{true, false} {
		var args []any
		for i := range bt.Keys {
			if bt.New[i] != nil && (bt.Old[i] == nil) == fresh {
				args = append(args, bt.Keys[i], bt.New[i], bt.Exp[i])
			}
		}
		if len(args) == 0 {
			continue
		}
		stmt := "INSERT INTO " + b.tbl + " (k, state, exp) VALUES (?, ?, ?)" + strings.Repeat(", (?, ?, ?)", len(args)/3-1)
		if !fresh {
			stmt += " ON DUPLICATE KEY UPDATE state = VALUES(state), exp = VALUES(exp)"
		}
		if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
			return casstore.Reply{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return casstore.Reply{}, err
	}
	return casstore.Reply{Swapped: true, Clock: now}, nil
}

// Delete deletes key's row.
func (b *backend) Delete(ctx context.Context, key []byte) error {
	if err := b.prepare(ctx); err != nil {
		return err
	}
	if _, err := b.db.ExecContext(ctx, "DELETE FROM "+b.tbl+" WHERE k = ?", key); err != nil {
		return wrap("reset", err)
	}
	return nil
}

// Expire deletes at most limit rows past their expiry, in one statement.
func (b *backend) Expire(ctx context.Context, before int64, limit int) (int64, error) {
	if err := b.prepare(ctx); err != nil {
		return 0, err
	}
	res, err := b.db.ExecContext(ctx, "DELETE FROM "+b.tbl+" WHERE exp < ? LIMIT ?", before, limit)
	if err != nil {
		return 0, wrap("sweeping", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, wrap("sweeping", err)
	}
	return n, nil
}
