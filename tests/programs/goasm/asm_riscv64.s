// SPDX-License-Identifier: GPL-2.0-or-later

#include "textflag.h"

// func asmmix(a, b, c int) int
TEXT ·asmmix(SB), NOSPLIT, $0-32
	MOV	a+0(FP), X5
	MOV	b+8(FP), X6
	SUB	X6, X5, X5
	MOV	c+16(FP), X7
	ADD	X7, X5, X5
	ADD	X7, X5, X5
	MOV	X5, ret+24(FP)
	RET
