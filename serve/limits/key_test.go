package limits

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
)

func TestKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("v", 300)
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	tests := []struct {
		domain  string
		entries []Entry
		want    string
	}{
		{"api", nil, "api"},
		{"api", e("user", "alice"), "api|user=alice"},
		{"api", e("user", "alice", "path", "/a|b"), "api|user=alice|path=/a%7Cb"},
		{"api", e("", ""), "api|="},
		{"a|b", e("c=d", "e%f#"), "a%7Cb|c%3Dd=e%25f%23"},
		{"api", e("k", long), "api|#" + hash("api|k="+long)},
		{strings.Repeat("d", 129), e("k", long), "#" + hash(strings.Repeat("d", 129)+"|k="+long)},
		{strings.Repeat("|", 50), e("k", long), "#" + hash(strings.Repeat("%7C", 50)+"|k="+long)},
		{strings.Repeat("d", 2000), nil, "#" + hash(strings.Repeat("d", 2000))},
	}
	for _, tt := range tests {
		got := Key(tt.domain, tt.entries)
		if got != tt.want {
			t.Errorf("Key(%.20q, %.40v) = %q, want %q", tt.domain, tt.entries, got, tt.want)
		}
		if len(got) > MaxKeyLen || core.ValidateKey(got) != nil {
			t.Errorf("Key(%.20q, %.40v) is %d bytes", tt.domain, tt.entries, len(got))
		}
	}
}

// TestKeyUnambiguous checks that descriptors that differ have different
// keys, however their parts are split.
func TestKeyUnambiguous(t *testing.T) {
	t.Parallel()
	sets := []struct {
		domain  string
		entries []Entry
	}{
		{"a", e("b", "c")},
		{"a|b", e("", "c")},
		{"a", e("b=c", "")},
		{"a", e("b", "", "", "c")},
		{"a", e("b", "c|")},
		{"a", e("b", "c", "", "")},
		{"a", e("b", "c%7C")},
		{"a", e("b", "#c")},
		{"a|#", nil},
	}
	seen := map[string]int{}
	for i, s := range sets {
		k := Key(s.domain, s.entries)
		if j, dup := seen[k]; dup {
			t.Errorf("descriptors %d and %d share the key %q", j, i, k)
		}
		seen[k] = i
	}
}

func TestKeyAllocs(t *testing.T) {
	short := e("user", "alice", "path", "/a")
	long := e("user", strings.Repeat("v", 400))
	huge := e("user", strings.Repeat("v", 4000))
	for _, tt := range []struct {
		entries []Entry
		want    float64
	}{{short, 1}, {long, 1}, {huge, 2}} {
		if got := testing.AllocsPerRun(100, func() { Key("api", tt.entries) }); got > tt.want {
			t.Errorf("Key of %d bytes allocates %v times, want %v", len(tt.entries[len(tt.entries)-1].Value), got, tt.want)
		}
	}
}
