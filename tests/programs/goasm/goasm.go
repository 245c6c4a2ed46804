// SPDX-License-Identifier: GPL-2.0-or-later
//
// Known arguments of Go functions that take them where `goprobe`'s do
// not: an assembly function (`asmmix`, written for the guests where Go
// has a register convention, so that there it takes its arguments on the
// stack, Go's ABI0, under a symbol ending in `.abi0`; a Go function on
// the others), and a Go function with more integer arguments than Go's
// register convention has registers on any guest (`many`, 18). Built
// static for every guest by scripts/build-guests.sh (CGO off).
//
// Prints one line per call, `name args... = result`, in decimal.
package main

import (
	"os"
	"strconv"
)

func say(name string, args []int, r int) {
	b := []byte(name)
	for _, a := range args {
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(a), 10)
	}
	b = append(b, " = "...)
	b = strconv.AppendInt(b, int64(r), 10)
	b = append(b, '\n')
	os.Stdout.Write(b)
}

// Eighteen arguments: past Go's nine registers on x86_64, twelve on
// ppc64le and sixteen on aarch64 and riscv64.
//
//go:noinline
func many(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r int) int {
	return a + 2*b + 3*c + d + e + f + g + h + i + j + k + l + m + n + o + p + q + 100*r
}

func main() {
	for _, v := range [][3]int{{7, 8, 9}, {100, 1, 20}} {
		say("asmmix", v[:], asmmix(v[0], v[1], v[2]))
	}
	args := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}
	r := many(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18)
	say("many", args, r)
}
