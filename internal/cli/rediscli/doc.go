// Package rediscli holds the sluice command's subcommands that talk to a
// Redis of the user's: inspect and bench. They are apart from package cli
// because they link go-redis and rueidis, which sim never uses, so that
// `go run ./cmd/sluice sim` compiles neither. cmd/sluice-redis runs them.
package rediscli
