// SPDX-License-Identifier: GPL-2.0-or-later
//
// A Go program as Go programs are, for the e2e tests: goroutines spread by
// the runtime over several OS threads, the garbage collector, channels,
// maps, the runtime's own signals (goroutine preemption) and a descriptor
// limit that the runtime raises by itself at start (Go 1.19 and later).
// Built static for every guest by scripts/build-guests.sh (CGO off).
//
// usage: gomix [ITEMS] [FILES]
//
// Prints a digest of the work (the same on every guest and every run), a
// line on the descriptor limit, and the numbers FILES descriptors opened
// after that got (lowest free first, as the kernel gives them: the guest
// must see the same ones traced as untraced, past the 1024 it started
// with).
package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const workers = 4

func arg(i int, def int) int {
	if len(os.Args) > i {
		if v, err := strconv.Atoi(os.Args[i]); err == nil {
			return v
		}
	}
	return def
}

type result struct {
	item int
	sum  [32]byte
}

func main() {
	items := arg(1, 3000)
	files := arg(2, 1100)
	runtime.GOMAXPROCS(workers)

	jobs := make(chan int, 64)
	results := make(chan result, 64)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				// Garbage on purpose: a fresh buffer per item.
				buf := make([]byte, 64+i%700)
				for j := range buf {
					buf[j] = byte(i*31 + j*7)
				}
				results <- result{i, sha256.Sum256(buf)}
			}
		}()
	}
	go func() {
		for i := 0; i < items; i++ {
			jobs <- i
		}
		close(jobs)
	}()
	go func() {
		wg.Wait()
		close(results)
	}()
	byItem := make(map[int][32]byte)
	for r := range results {
		byItem[r.item] = r.sum
	}
	runtime.GC()
	keys := make([]int, 0, len(byItem))
	for k := range byItem {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	h := sha256.New()
	for _, k := range keys {
		s := byItem[k]
		h.Write(s[:])
	}
	fmt.Printf("items %d digest %x\n", len(keys), h.Sum(nil))

	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("getrlimit:", err)
		os.Exit(1)
	}
	fmt.Printf("nofile soft limit raised to the hard one: %v\n", lim.Cur == lim.Max)
	if uint64(files)+64 > lim.Cur {
		files = int(lim.Cur) - 64
	}
	// The runtime's netpoller takes three descriptors when the first
	// timer or pollable file needs it. The garbage collector's scavenger
	// sleeping on a timer may come first or not, depending on how fast
	// the threads run (a loaded machine, a traced run): a sleep here makes
	// them first in every run, so that the opens below get the same ones.
	time.Sleep(time.Millisecond)
	opened := make([]*os.File, 0, files)
	for i := 0; i < files; i++ {
		f, err := os.Open("/dev/null")
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(1)
		}
		opened = append(opened, f)
	}
	fds := make([]int, len(opened))
	for i, f := range opened {
		fds[i] = int(f.Fd())
	}
	sort.Ints(fds)
	// As ranges: the runtime's own descriptors (its netpoller's, made by
	// the sleep above) come before them, the same ones traced or not.
	ranges := ""
	for i := 0; i < len(fds); {
		j := i
		for j+1 < len(fds) && fds[j+1] == fds[j]+1 {
			j++
		}
		if ranges != "" {
			ranges += " "
		}
		if i == j {
			ranges += strconv.Itoa(fds[i])
		} else {
			ranges += fmt.Sprintf("%d-%d", fds[i], fds[j])
		}
		i = j + 1
	}
	fmt.Printf("opened %d descriptors: %s\n", len(fds), ranges)
	for _, f := range opened {
		f.Close()
	}
}
