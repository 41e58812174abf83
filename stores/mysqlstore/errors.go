package mysqlstore

import (
	"database/sql/driver"
	"errors"
	"slices"

	"github.com/go-sql-driver/mysql"

	"github.com/sluicehq/sluice/stores/casstore"
)

// wrap returns err, from doing what, with the store's prefix, marked with
// [core.ErrUnavailable] if any call would get it while the server stays
// as it is (see [Unavailable]).
func wrap(doing string, err error) error {
	return casstore.Wrap("mysqlstore", doing, err, Unavailable)
}

// Unavailable reports whether err is one any call would get while the
// server stays as it is: a connection the driver found broken
// (mysql.ErrInvalidConn, driver.ErrBadConn), or a server error by its
// number: too many connections (1040), out of memory or resources
// (1037, 1038, 1041), shutdown in progress (1053), a connection killed
// (1927), a lock wait or statement timeout (1205, 1969, 3024), and a
// server or transaction that is read-only (1290, 1792, 1836). The store
// marks such errors with core.ErrUnavailable, which package policy's
// breaker counts as the store's failure.
func Unavailable(err error) bool {
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	me, ok := errors.AsType[*mysql.MySQLError](err)
	return ok && slices.Contains(unavailable, me.Number)
}

// unavailable are the server's error numbers [Unavailable] counts.
var unavailable = []uint16{1037, 1038, 1040, 1041, 1053, 1205, 1290, 1792, 1836, 1927, 1969, 3024}

// conflict reports whether err ended a Swap's transaction because of
// another caller's: a duplicate key (1062, a new row made meanwhile) or
// a deadlock (1213).
func conflict(err error) bool {
	me, ok := errors.AsType[*mysql.MySQLError](err)
	return ok && (me.Number == 1062 || me.Number == 1213)
}
