// SPDX-License-Identifier: Apache-2.0

//go:build !purego

#include "textflag.h"
#include "specials_amd64.h"

// func plainLen(b []byte) int
//
// Sixteen bytes at a time with SSE2, which every amd64 processor has.
TEXT ·plainLen(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	MOVQ SI, DI
	SPLATS
	CMPQ CX, $16
	JB   short

loop:
	MOVOU (SI), X0
	SPECIALS(AX)
	TESTL AX, AX
	JNZ   found
	ADDQ  $16, SI
	SUBQ  $16, CX
	CMPQ  CX, $16
	JAE   loop
	TESTQ CX, CX
	JZ    none

	// Fewer than 16 bytes left, after at least 16: load the last 16 bytes of b and drop the mask
	// bits of the bytes already checked.
	LEAQ  -16(SI)(CX*1), SI
	MOVOU (SI), X0
	SPECIALS(AX)
	NEGQ  CX
	ADDQ  $16, CX
	SHRL  CX, AX
	TESTL AX, AX
	JZ    none
	ADDQ  CX, SI
	JMP   found

short:
	// b is shorter than 16 bytes: one byte at a time.
	TESTQ CX, CX
	JZ    none
	MOVBLZX (SI), AX
	CMPB  AL, $0x22
	JEQ   at
	CMPB  AL, $0x5c
	JEQ   at
	CMPB  AL, $0x20
	JB    at
	CMPB  AL, $0x80
	JAE   at
	INCQ  SI
	DECQ  CX
	JMP   short

at:
	SUBQ  DI, SI
	MOVQ  SI, ret+24(FP)
	RET

found:
	BSFL  AX, AX
	SUBQ  DI, SI
	ADDQ  SI, AX
	MOVQ  AX, ret+24(FP)
	RET

none:
	MOVQ  b_len+8(FP), AX
	MOVQ  AX, ret+24(FP)
	RET
