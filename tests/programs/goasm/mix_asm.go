// SPDX-License-Identifier: GPL-2.0-or-later

//go:build amd64 || arm64 || riscv64 || ppc64le

package main

// a - b + 2c, in assembly (asm_GOARCH.s).
func asmmix(a, b, c int) int
