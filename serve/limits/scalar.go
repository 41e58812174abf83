package limits

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The peer reads its files with gopkg.in/yaml.v2, which resolves plain
// scalars by YAML 1.1's rules: yes, on and y are booleans, 0x1F and 017
// are integers, 1_000 is 1000. yaml.v3 resolves them by YAML 1.2's, so
// this file classifies a scalar as yaml.v2 would, for the value to mean
// in sluice what it meant to the peer.

// kind is what yaml.v2 resolves a scalar to.
type kind int

const (
	kindString kind = iota // also timestamps, which yaml.v2 leaves as text
	kindNull
	kindBool
	kindInt    // fits an int64
	kindBigInt // above math.MaxInt64: yaml.v2 makes it a uint64, which the peer rejects
	kindFloat  // the peer rejects floats everywhere
)

// scalar is a resolved scalar: its kind, and its value for booleans and
// integers.
type scalar struct {
	kind kind
	b    bool
	i    int64
}

// quoted are the styles whose scalars yaml.v2 never resolves: they are
// strings whatever they hold.
const quoted = yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle

// yamlFloat is yaml.v2's pattern for a float written in decimal.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// resolve classifies the scalar node n, or says why it cannot: an explicit
// tag other than !!str, which yaml.v2 would treat in ways not worth
// reproducing.
func resolve(n *yaml.Node) (scalar, string) {
	switch {
	case n.Style&quoted != 0:
		return scalar{kind: kindString}, ""
	case n.Style&yaml.TaggedStyle != 0:
		if n.ShortTag() == "!!str" {
			return scalar{kind: kindString}, ""
		}
		return scalar{}, "explicit YAML tag " + strconv.Quote(n.Tag) + " is not supported; remove it, or quote the value"
	}
	return resolvePlain(n.Value), ""
}

// resolvePlain classifies an unquoted, untagged scalar as yaml.v2's
// resolve does.
func resolvePlain(s string) scalar {
	switch s {
	case "", "~", "null", "Null", "NULL":
		return scalar{kind: kindNull}
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		return scalar{kind: kindBool, b: true}
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		return scalar{kind: kindBool}
	case ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF":
		return scalar{kind: kindFloat}
	}
	switch c := s[0]; {
	case c == '.':
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return scalar{kind: kindFloat}
		}
	case c == '+' || c == '-' || '0' <= c && c <= '9':
		// yaml.v2 tries a timestamp first; none parses as a number, so
		// skipping that step changes nothing here.
		plain := strings.ReplaceAll(s, "_", "")
		if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return scalar{kind: kindInt, i: i}
		}
		if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return scalar{kind: kindBigInt}
		}
		if yamlFloat.MatchString(plain) {
			if _, err := strconv.ParseFloat(plain, 64); err == nil {
				return scalar{kind: kindFloat}
			}
		}
		switch {
		case strings.HasPrefix(plain, "0b"):
			if i, err := strconv.ParseInt(plain[2:], 2, 64); err == nil {
				return scalar{kind: kindInt, i: i}
			}
			if _, err := strconv.ParseUint(plain[2:], 2, 64); err == nil {
				return scalar{kind: kindBigInt}
			}
		case strings.HasPrefix(plain, "-0b"):
			if i, err := strconv.ParseInt("-"+plain[3:], 2, 64); err == nil {
				return scalar{kind: kindInt, i: i}
			}
		}
	}
	return scalar{kind: kindString}
}

// isMergeKey reports whether n is the merge key <<, which yaml.v2 honours
// in every mapping.
func isMergeKey(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "<<" && n.Style&quoted == 0 &&
		(n.Style&yaml.TaggedStyle == 0 || n.ShortTag() == "!!merge")
}

// String names what a scalar of kind k is, for errors.
func (k kind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "a boolean"
	case kindInt:
		return "an integer"
	case kindBigInt:
		return "an integer above " + strconv.FormatInt(math.MaxInt64, 10)
	case kindFloat:
		return "a floating-point number"
	}
	return "a string"
}
