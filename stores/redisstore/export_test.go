package redisstore

import "github.com/redis/go-redis/v9"

// NewPortable is New, with every script sent in its portable form
// (algorithms.Script.Portable), as to a server without Lua's struct
// library: so that the parity tests hold the portable form to the Go
// transitions on a real Redis too.
func NewPortable(client redis.UniversalClient, cfg Config) (*Store, error) {
	return newStore(client, cfg, true)
}
