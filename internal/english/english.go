// Package english words what the service and its tools print for people:
// the console's pages, fulfillctl's tables and fulfillmentd's messages.
package english

import (
	"fmt"
	"strings"
)

// Integer is any integer type: counts come as an int (len), an int32 or an
// int64 (the API's fields).
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Plural is the count n and noun, the noun in the plural unless n is 1:
// "1 line", "0 lines", "2 older deliveries".
func Plural[N Integer](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprint(n) + " " + pluralOf(noun)
}

// pluralOf is noun in the plural, by the rule the nouns printed here
// follow: a consonant and y take ies ("delivery", "deliveries"), others an
// s ("day", "days"; "attempt", "attempts").
func pluralOf(noun string) string {
	if stem, ok := strings.CutSuffix(noun, "y"); ok && stem != "" && !strings.ContainsAny(stem[len(stem)-1:], "aeiou") {
		return stem + "ies"
	}
	return noun + "s"
}
