// SPDX-License-Identifier: GPL-2.0-or-later

#include "textflag.h"

// func asmmix(a, b, c int) int
TEXT ·asmmix(SB), NOSPLIT, $0-32
	MOVQ	a+0(FP), AX
	SUBQ	b+8(FP), AX
	MOVQ	c+16(FP), BX
	ADDQ	BX, AX
	ADDQ	BX, AX
	MOVQ	AX, ret+24(FP)
	RET
