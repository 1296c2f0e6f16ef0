//go:build !purego

#include "textflag.h"

// func plainLen(b []byte) int
//
// Sixteen bytes at a time with SSE2, which every amd64 processor has. A byte needs a look when it is
// a quote, a backslash, or below 0x20 as a signed byte: that one signed comparison takes both the
// control bytes and every byte of 0x80 and above.
TEXT ·plainLen(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	MOVQ SI, DI
	MOVQ $0x2222222222222222, AX
	MOVQ AX, X1
	PUNPCKLQDQ X1, X1
	MOVQ $0x5c5c5c5c5c5c5c5c, AX
	MOVQ AX, X2
	PUNPCKLQDQ X2, X2
	MOVQ $0x2020202020202020, AX
	MOVQ AX, X3
	PUNPCKLQDQ X3, X3
	CMPQ CX, $16
	JB   short

loop:
	MOVOU (SI), X0
	MOVO  X3, X4
	PCMPGTB X0, X4
	MOVO  X0, X5
	PCMPEQB X1, X5
	POR   X5, X4
	PCMPEQB X2, X0
	POR   X0, X4
	PMOVMSKB X4, AX
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
	MOVO  X3, X4
	PCMPGTB X0, X4
	MOVO  X0, X5
	PCMPEQB X1, X5
	POR   X5, X4
	PCMPEQB X2, X0
	POR   X0, X4
	PMOVMSKB X4, AX
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
