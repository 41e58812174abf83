package pgstore

import (
	"cmp"
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/stores/casstore"
)

// DefaultTable is the table of a [Config] without one.
const DefaultTable = "sluice_state"

// Config configures a [Store]. The zero Config is ready to use.
type Config struct {
	// Table is the name of the table the store keeps its states in,
	// schema-qualified or not ("limits" or "app.limits"); the store's
	// function is named after it, with "_apply" added. The store's first
	// call creates both if they do not exist. The default is
	// [DefaultTable].
	Table string
	// Logged makes the store create the table as an ordinary, WAL-logged
	// table. By default it is UNLOGGED: a decision writes no WAL, and a
	// crash of the server, or a failover to a replica, forgets every
	// key's state, as if each had never been charged (each key may then
	// admit one more burst). It has no effect on a table that exists.
	Logged bool
	// Config holds the kit's settings, each documented, with its
	// default, in [casstore.Config]: MaxLag, how far a decision's instant
	// may trail the server's clock; CacheKeys, how many keys' last known
	// states the store keeps; SweepInterval, how often it deletes the
	// rows of idle keys; and MaxSwaps, how many calls of the database it
	// has in flight at once (give the pool at least as many connections).
	casstore.Config
}

// Store keeps limiter state in a PostgreSQL table through a pgx pool: a
// [casstore.Store] whose backend is one PL/pgSQL function, so that a
// decision, or a batch, is one round trip. It is safe for concurrent
// use, and does not own its pool: Close does not close it.
type Store struct {
	*casstore.Store
}

var _ core.Store = (*Store)(nil)

// New returns a store on pool. It does not reach the server: the store's
// first call creates its table and function if they do not exist (which
// needs the CREATE privilege on the schema), and a later call tries
// again if that failed, so that a process starts while its server is
// down.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: nil pool")
	}
	tbl, fn, stmts := schema(cmp.Or(cfg.Table, DefaultTable), cfg.Logged)
	be := &backend{
		pool:    pool,
		tbl:     tbl,
		call:    "SELECT ok, clock, cur FROM " + fn + "($1, $2, $3, $4, $5, $6)",
		creates: stmts,
	}
	s, err := casstore.New(be, cfg.Config)
	if err != nil {
		return nil, err
	}
	return &Store{s}, nil
}

// backend is the store's [casstore.Backend]: the table and its function.
type backend struct {
	pool    *pgxpool.Pool
	tbl     string         // the table's quoted name
	call    string         // the function's call
	creates []string       // the schema's statements
	setup   casstore.Setup // runs them
}

// prepare creates the schema on the backend's first call: it runs the
// statements in one transaction, under an advisory lock so that
// processes starting together do not trip over each other's CREATE.
func (b *backend) prepare(ctx context.Context) error {
	return b.setup.Do(func() error { return b.create(ctx) })
}

// create runs the schema's statements.
func (b *backend) create(ctx context.Context) error {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return wrap("creating the schema", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "sluice:"+b.tbl); err != nil {
		return wrap("creating the schema", err)
	}
	for _, stmt := range b.creates {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return wrap("creating the schema", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap("creating the schema", err)
	}
	return nil
}

// Swap calls the store's function (see schema).
func (b *backend) Swap(ctx context.Context, bt *casstore.Batch) (casstore.Reply, error) {
	if err := b.prepare(ctx); err != nil {
		return casstore.Reply{}, err
	}
	var r casstore.Reply
	err := b.pool.QueryRow(ctx, b.call, bt.Keys, bt.Old, bt.New, bt.Exp, bt.At, bt.Lag).Scan(&r.Swapped, &r.Clock, &r.Cur)
	if err != nil {
		return casstore.Reply{}, wrap("deciding", err)
	}
	return r, nil
}

// Delete deletes key's row.
func (b *backend) Delete(ctx context.Context, key []byte) error {
	if err := b.prepare(ctx); err != nil {
		return err
	}
	if _, err := b.pool.Exec(ctx, "DELETE FROM "+b.tbl+" WHERE k = $1", key); err != nil {
		return wrap("reset", err)
	}
	return nil
}

// Expire deletes at most limit rows past their expiry, in one statement.
func (b *backend) Expire(ctx context.Context, before int64, limit int) (int64, error) {
	if err := b.prepare(ctx); err != nil {
		return 0, err
	}
	tag, err := b.pool.Exec(ctx, "DELETE FROM "+b.tbl+" WHERE k IN (SELECT k FROM "+b.tbl+" WHERE exp < $1 LIMIT $2) AND exp < $1", before, limit)
	if err != nil {
		return 0, wrap("sweeping", err)
	}
	return tag.RowsAffected(), nil
}
