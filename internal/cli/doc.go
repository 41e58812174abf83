// Package cli is the sluice command: its subcommands and their
// dispatcher, in a package so that two builds share them. cmd/sluice, in
// the library's module, runs [Commands] as they are; cmd/sluice-redis
// builds the same program with the commands that talk to Redis in place
// of the placeholders that say where they are. The command's
// documentation is cmd/sluice's.
package cli
