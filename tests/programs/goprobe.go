// SPDX-License-Identifier: GPL-2.0-or-later
//
// Known arguments and results of Go functions, for the probe's Go calling
// conventions: Go's register ABI (ABIInternal) on x86_64, aarch64,
// riscv64 and ppc64le, its stack ABI (ABI0) on the 32-bit guests and
// MIPS. Built static for every guest by scripts/build-guests.sh (CGO off).
//
// Prints one line per call of `mix`, `fact`, `wide` and `leaf`, as `name args... = result`
// in decimal, in the order of the calls' returns; the e2e tests compare
// the probe's hits with them. The main goroutine stays on the main thread,
// so that the hits of one thread are every hit, in order.
//
// `goprobe relay` instead passes a token around a ring of goroutines,
// each blocking inside `relay` until the token comes (parked, so that its
// thread runs another goroutine's `relay`, and resumed on whichever thread
// readied it), and prints one line per call, `relay id round = result`,
// after all have ended.
//
// `goprobe grow` runs `grown` in four new goroutines, one after the other,
// each call growing its goroutine's stack from the runtime's smallest
// several times over (so the runtime moves it while `grown`'s frame, and
// `deep`'s, are open), and prints `grown id n = result` per call.
package main

import (
	"os"
	"runtime"
	"strconv"
	"sync"
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

// A leaf without a frame: Go's `RET` on arm is `add pc, lr, #0`.
//
//go:noinline
func leaf(a, b int) int {
	return a ^ b
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

// Waits for the token, passes it on, and returns what it got, told apart
// by the goroutine.
//
//go:noinline
func relay(id, round int, in <-chan int, next chan<- int) int {
	t := <-in
	next <- t + 1
	return t*10 + id
}

// Grows the goroutine's stack once, before any `relay`: a stack the
// runtime moves later would run `relay`'s entry again on the new stack.
//
//go:noinline
func deep(n int) int {
	var pad [64]int
	pad[n%64] = n
	if n == 0 {
		return pad[0]
	}
	return deep(n-1) + pad[n%64]
}

func ring() {
	const goroutines, rounds = 4, 25
	var chans [goroutines]chan int
	for i := range chans {
		chans[i] = make(chan int, 1)
	}
	said := make([][]byte, goroutines)
	var wg sync.WaitGroup
	for id := 0; id < goroutines; id++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			deep(64)
			var b []byte
			for r := 0; r < rounds; r++ {
				v := relay(id, r, chans[id], chans[(id+1)%goroutines])
				b = append(b, "relay "...)
				b = strconv.AppendInt(b, int64(id), 10)
				b = append(b, ' ')
				b = strconv.AppendInt(b, int64(r), 10)
				b = append(b, " = "...)
				b = strconv.AppendInt(b, int64(v), 10)
				b = append(b, '\n')
			}
			said[id] = b
		}(id)
	}
	chans[0] <- 0
	wg.Wait()
	for _, b := range said {
		os.Stdout.Write(b)
	}
}

// Recurses `n` levels of `deep` below its own frame: about 600 bytes a
// level, so 200 levels move a new goroutine's stack six times.
//
//go:noinline
func grown(id, n int) int {
	return deep(n)*10 + id
}

func grow() {
	var b []byte
	for id := 0; id < 4; id++ {
		done := make(chan int)
		go func(id int) {
			done <- grown(id, 200)
		}(id)
		v := <-done
		b = append(b, "grown "...)
		b = strconv.AppendInt(b, int64(id), 10)
		b = append(b, " 200 = "...)
		b = strconv.AppendInt(b, int64(v), 10)
		b = append(b, '\n')
	}
	os.Stdout.Write(b)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		ring()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "grow" {
		grow()
		return
	}
	s := 0
	for i := 1; i <= 3; i++ {
		s += mix(i, i+1, i+2)
	}
	s += fact(5)
	s += wide(11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	l := leaf(6, 3)
	say("leaf", []int{6, 3}, l)
	s += l
	out = append(out, "sum "...)
	out = strconv.AppendInt(out, int64(s), 10)
	out = append(out, '\n')
	os.Stdout.Write(out)
}
