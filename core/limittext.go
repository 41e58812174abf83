package core

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// unlimited is the text form of [Inf].
const unlimited = "unlimited"

// units are the period names the text form reads. The first four are the
// ones it writes.
var units = map[string]time.Duration{
	"s":      time.Second,
	"min":    time.Minute,
	"h":      time.Hour,
	"day":    24 * time.Hour,
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
}

// ParseLimit parses the text form of a limit, as [Limit.MarshalText]
// writes it: a rate of N events per period, "N/PERIOD", optionally followed
// by "burst N"; or "unlimited" for [Inf]. PERIOD is s, min, h or day (or
// second, minute, hour), or a Go duration such as 250ms or 1h30m:
//
//	100/min
//	10/s burst 50
//	1000/day
//	1/250ms
//	unlimited
//
// The burst defaults to the rate, as with [Per]. Words are separated by
// spaces; N is a decimal integer. ParseLimit returns only limits that
// [Limit.Validate] accepts; every error wraps [ErrInvalidLimit] and names
// the part at fault. For every valid limit l, ParseLimit of l's text form
// is l.
func ParseLimit(s string) (Limit, error) {
	l, problem := parseLimit(s)
	if problem != "" {
		return Limit{}, fmt.Errorf("%w: %q: %s", ErrInvalidLimit, s, problem)
	}
	return l, nil
}

// parseLimit parses s, or says what is wrong with it.
func parseLimit(s string) (Limit, string) {
	words := strings.Fields(s)
	switch {
	case len(words) == 0:
		return Limit{}, "empty; want N/PERIOD, such as 100/min or 10/s burst 50, or unlimited"
	case words[0] == unlimited:
		if len(words) > 1 {
			return Limit{}, fmt.Sprintf("unexpected %q after unlimited", words[1])
		}
		return Inf, ""
	}
	count, per, ok := strings.Cut(words[0], "/")
	if !ok {
		return Limit{}, "want N/PERIOD, such as 100/min, 10/s burst 50 or 1/250ms"
	}
	n, problem := parseCount("rate", count)
	if problem != "" {
		return Limit{}, problem
	}
	period, ok := units[per]
	if !ok {
		d, err := time.ParseDuration(per)
		if err != nil {
			return Limit{}, fmt.Sprintf("unknown unit %q (want s, min, h, day or a duration such as 250ms)", per)
		}
		period = d
	}
	l := Per(n, period)
	if len(words) > 1 {
		switch {
		case words[1] != "burst":
			return Limit{}, fmt.Sprintf("unexpected %q after the rate; want burst N", words[1])
		case len(words) == 2:
			return Limit{}, "burst wants a number after it, such as burst 50"
		case len(words) > 3:
			return Limit{}, fmt.Sprintf("unexpected %q after the burst", words[3])
		}
		b, problem := parseCount("burst", words[2])
		if problem != "" {
			return Limit{}, problem
		}
		l = l.WithBurst(b)
	}
	if p := l.problem(); p != "" {
		return Limit{}, p
	}
	return l, ""
}

// parseCount parses the decimal integer s, the limit's part named what.
// The caller judges its value.
func parseCount(what, s string) (int64, string) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, fmt.Sprintf("%s %s is out of range (1 to 2^52)", what, s)
	case err != nil || strings.HasPrefix(s, "+"):
		return 0, fmt.Sprintf("%s %q is not a whole number", what, s)
	}
	return n, ""
}

// MarshalText implements [encoding.TextMarshaler], so that a Limit reads
// and writes itself as text in flags ([flag.TextVar]), JSON, YAML and
// environment variables. It writes the form [ParseLimit] reads, with the
// period as s, min, h or day when it is one of those and as a Go duration
// otherwise, and the burst only when it is not the rate: "10/s burst 50",
// "100/min", "1/250ms", "unlimited". A limit [Limit.Validate] rejects has
// no text form: MarshalText returns its error.
func (l Limit) MarshalText() ([]byte, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l.IsInf() {
		return []byte(unlimited), nil
	}
	b := strconv.AppendInt(nil, l.Rate(), 10)
	b = append(b, '/')
	switch l.PeriodMicros() {
	case 1e6:
		b = append(b, 's')
	case 60e6:
		b = append(b, "min"...)
	case 3600e6:
		b = append(b, 'h')
	case 86400e6:
		b = append(b, "day"...)
	default:
		b = append(b, shortDuration(l.Period())...)
	}
	if l.burst != l.Rate() {
		b = append(b, " burst "...)
		b = strconv.AppendInt(b, l.burst, 10)
	}
	return b, nil
}

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseLimit].
// On error it leaves l unchanged.
func (l *Limit) UnmarshalText(text []byte) error {
	parsed, err := ParseLimit(string(text))
	if err != nil {
		return err
	}
	*l = parsed
	return nil
}

// shortDuration formats d as [time.Duration.String] does, less the zero
// minutes and seconds it writes after hours and minutes: 1h30m, not
// 1h30m0s; 2m, not 2m0s. [time.ParseDuration] reads it back to d.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
