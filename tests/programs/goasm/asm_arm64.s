// SPDX-License-Identifier: GPL-2.0-or-later

#include "textflag.h"

// func asmmix(a, b, c int) int
TEXT ·asmmix(SB), NOSPLIT, $0-32
	MOVD	a+0(FP), R0
	MOVD	b+8(FP), R1
	SUB	R1, R0, R0
	MOVD	c+16(FP), R2
	ADD	R2, R0, R0
	ADD	R2, R0, R0
	MOVD	R0, ret+24(FP)
	RET
