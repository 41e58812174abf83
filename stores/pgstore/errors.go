package pgstore

import (
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/stores/casstore"
)

// wrap returns err, from doing what, with the store's prefix, marked with
// [core.ErrUnavailable] if any call would get it while the server stays
// as it is (see [Unavailable]).
func wrap(doing string, err error) error {
	return casstore.Wrap("pgstore", doing, err, Unavailable)
}

// Unavailable reports whether err is a PostgreSQL error that any call
// would get while the server stays as it is, by its SQLSTATE: a
// connection exception (class 08), insufficient resources (class 53:
// too many connections, disk full, out of memory), an operator's
// intervention (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot
// connect now), a statement timeout (57014, query canceled, which is also
// what a cancelled caller gets, but package policy leaves out a call
// whose caller gave up before it looks at the error), and a read-only
// transaction (25006: a replica, or default_transaction_read_only). The
// store marks such errors with core.ErrUnavailable, which package
// policy's breaker counts as the store's failure. Broken connections and
// timeouts of the client need no mark: the breaker knows them by their
// types.
func Unavailable(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53") ||
		slices.Contains(unavailable, pe.Code))
}

// unavailable are the SQLSTATEs, besides classes 08 and 53, that
// [Unavailable] counts.
var unavailable = []string{"57P01", "57P02", "57P03", "57014", "25006"}
