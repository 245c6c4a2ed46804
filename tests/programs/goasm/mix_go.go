// SPDX-License-Identifier: GPL-2.0-or-later

//go:build !(amd64 || arm64 || riscv64 || ppc64le)

package main

// a - b + 2c. Go's only convention here is its stack one, which the
// probe already reads for every function.
//
//go:noinline
func asmmix(a, b, c int) int {
	return a - b + 2*c
}
