module github.com/sluicehq/sluice/stores/mysqlstore

go 1.26.0

replace github.com/sluicehq/sluice => ../..

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/sluicehq/sluice v0.0.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
)
