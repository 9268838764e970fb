// Package spreadsheet keeps text written to CSV from being taken for a formula by a spreadsheet that opens it
// (CSV injection): the one rule the usage API's and the gpuhub CLI's CSV share.
package spreadsheet

import "strings"

// Text is s with a leading quote where it starts like a formula (=, +, -, @, a tab or a carriage return).
func Text(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
