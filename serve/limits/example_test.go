package limits_test

import (
	"fmt"

	"github.com/sluicehq/sluice/serve/limits"
)

func Example() {
	const config = `
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: user
    value: admin
    rate_limit:
      unlimited: true
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit:
      limit: 10/s burst 50
      algorithm: token-bucket
`
	set, err := limits.Parse(limits.Options{}, limits.File{Name: "api.yaml", Data: []byte(config)})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, entries := range [][]limits.Entry{
		{{Key: "user", Value: "alice"}},
		{{Key: "user", Value: "admin"}},
		{{Key: "path", Value: "/files/a.pdf"}},
		{{Key: "path", Value: "/img/logo.png"}},
	} {
		m := set.Match("api", entries)
		if m.Rule == nil {
			fmt.Printf("%v: no limit\n", entries)
			continue
		}
		fmt.Printf("%v: %v (%s), key %s, metric %s\n", entries, m.Rule.Limit, m.Rule.Algorithm.Name(), m.Key, m.Metric)
	}
	// Output:
	// [{user alice}]: 100 req/min (burst 100) (fixed-window), key api|user=alice, metric api.user
	// [{user admin}]: unlimited (fixed-window), key api|user=admin, metric api.user_admin
	// [{path /files/a.pdf}]: 10 req/s (burst 50) (token-bucket), key api|path=/files/*, metric api.path_/files/*
	// [{path /img/logo.png}]: no limit
}

func ExampleParse_errors() {
	const config = `
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minutes
      requests_per_unit: 100
  - key: path
    shadow_mode: yes
    rate_limit:
      unit: second
      requests_per_unit: 10
      shadow_mode: true
`
	_, err := limits.Parse(limits.Options{}, limits.File{Name: "limits/api.yaml", Data: []byte(config)})
	fmt.Println(err)
	// Output:
	// limits/api.yaml:6: descriptor "user": invalid rate limit unit "minutes" (want second, minute, hour, day, week, month or year)
	// limits/api.yaml:13: descriptor "path": key "shadow_mode" does not belong in rate_limit; it belongs in a descriptor
}
