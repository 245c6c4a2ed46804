// SPDX-License-Identifier: GPL-2.0-or-later

#include "textflag.h"

// func asmmix(a, b, c int) int
TEXT ·asmmix(SB), NOSPLIT, $0-32
	MOVD	a+0(FP), R3
	MOVD	b+8(FP), R4
	SUB	R4, R3, R3
	MOVD	c+16(FP), R5
	ADD	R5, R3, R3
	ADD	R5, R3, R3
	MOVD	R3, ret+24(FP)
	RET
