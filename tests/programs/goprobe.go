// SPDX-License-Identifier: GPL-2.0-or-later
//
// Known arguments and results of Go functions, for the probe's Go calling
// conventions: Go's register ABI (ABIInternal) on x86_64, aarch64,
// riscv64 and ppc64le, its stack ABI (ABI0) on the 32-bit guests and
// MIPS. Built static for every guest by scripts/build-guests.sh (CGO off).
//
// Prints one line per call of `mix`, `fact` and `wide`, as `name args... = result`
// in decimal, in the order of the calls' returns; the e2e tests compare
// the probe's hits with them. The main goroutine stays on the main thread,
// so that the hits of one thread are every hit, in order.
package main

import (
	"os"
	"runtime"
	"strconv"
)

func init() {
	runtime.LockOSThread()
}

var out []byte

func say(name string, args []int, r int) {
	out = append(out, name...)
	for _, a := range args {
		out = append(out, ' ')
		out = strconv.AppendInt(out, int64(a), 10)
	}
	out = append(out, " = "...)
	out = strconv.AppendInt(out, int64(r), 10)
	out = append(out, '\n')
}

// Three arguments and a result that tell them apart.
//
//go:noinline
func mix(a, b, c int) int {
	r := a*100 + b*10 + c
	say("mix", []int{a, b, c}, r)
	return r
}

// Ten arguments: past Go's nine registers on x86_64 (the tenth on the
// stack), past C's eight on the other register guests.
//
//go:noinline
func wide(a, b, c, d, e, f, g, h, i, j int) int {
	r := a + b + c + d + e + f + g + h + i + j
	say("wide", []int{a, b, c, d, e, f, g, h, i, j}, r)
	return r
}

// Recursion: every level has its own frame and result.
//
//go:noinline
func fact(n int) int {
	r := 1
	if n > 1 {
		r = n * fact(n-1)
	}
	say("fact", []int{n}, r)
	return r
}

func main() {
	s := 0
	for i := 1; i <= 3; i++ {
		s += mix(i, i+1, i+2)
	}
	s += fact(5)
	s += wide(11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	out = append(out, "sum "...)
	out = strconv.AppendInt(out, int64(s), 10)
	out = append(out, '\n')
	os.Stdout.Write(out)
}
