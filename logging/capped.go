package logging

import (
	"strconv"
	"unicode/utf8"
)

// CapBytes is how much of an untrusted string Capped shows.
const CapBytes = 64

// Capped returns s whole if it is at most CapBytes long, and otherwise its
// first CapBytes bytes (cut back to a whole UTF-8 character) followed by
// "… (N bytes)", N being the length of s. Use it wherever input a caller
// chose (a request body, a label name, a key) goes into a log line or an
// error message: a caller must not be able to make either unbounded.
func Capped(s string) string { return Cap(s, CapBytes) }

// Cap is Capped with a limit of n bytes instead of CapBytes; n < 1 counts
// as 1.
func Cap(s string, n int) string {
	n = max(n, 1)
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
