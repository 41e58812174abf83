package redisengine_test

import (
	"fmt"

	"github.com/sluicehq/sluice/stores/internal/redisengine"
)

// A key's state lives under its own hash tag, with braces in the key
// escaped so that no key can choose another's Redis Cluster slot.
func ExampleKey() {
	fmt.Println(redisengine.Key("sluice:", "user:42", "token-bucket"))
	fmt.Println(redisengine.Key("sluice:", "{victim}x", "token-bucket"))
	// Output:
	// sluice:{user:42}:token-bucket
	// sluice:{%7Bvictim%7Dx}:token-bucket
}
