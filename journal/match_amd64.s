// SPDX-License-Identifier: Apache-2.0

//go:build !purego

#include "go_asm.h"
#include "textflag.h"
#include "specials_amd64.h"

// func matchSteps(b, text []byte, steps []fastStep, vals []int) (n, res int)
//
// The fast path of shape.match, for what lines mostly hold: text compared 16 bytes at a time, string
// bodies of plain ASCII scanned 16 bytes at a time, numbers that are plain runs of digits. It answers
// resMatch (n is the line's length and vals holds each value's start and end), resMismatch (the text
// differs: the line is not of this shape), or resUnsure for anything else: an escape, non-ASCII, a
// fraction or exponent, a leading zero, fewer than 16 bytes to spare past the text or a string, or a
// string longer than plainWindow.
// Every load is within b, or within text's capacity, which holds 16 bytes past the shape's line.
// fastStep's layout and the constants come from go_asm.h, which the go tool writes from the package's
// Go declarations: a change there changes the offsets here, or breaks the build.
TEXT ·matchSteps(SB), NOSPLIT, $0-112
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), R8
	MOVQ text_base+24(FP), R9
	MOVQ steps_base+48(FP), DI
	MOVQ steps_len+56(FP), R13
	MOVQ vals_base+72(FP), R10
	XORQ R11, R11
	SPLATS

step:
	TESTQ R13, R13
	JZ    unsure
	MOVQ  fastStep_off(DI), R12 // the text's offset in text
	MOVQ  fastStep_n(DI), DX    // its length
	LEAQ  16(R11)(DX*1), AX
	CMPQ  AX, R8
	JA    unsure
	LEAQ  (SI)(R11*1), AX
	LEAQ  (R9)(R12*1), BX
	ADDQ  DX, R11

lit16:
	CMPQ     DX, $16
	JB       litTail
	MOVOU    (AX), X4
	MOVOU    (BX), X5
	PCMPEQB  X5, X4
	PMOVMSKB X4, CX
	CMPL     CX, $0xffff
	JNE      mismatch
	ADDQ     $16, AX
	ADDQ     $16, BX
	SUBQ     $16, DX
	JMP      lit16

litTail:
	TESTQ    DX, DX
	JZ       value
	MOVOU    (AX), X4
	MOVOU    (BX), X5
	PCMPEQB  X5, X4
	PMOVMSKB X4, AX
	NOTL     AX
	MOVL     DX, CX
	MOVL     $1, BX
	SHLL     CX, BX
	DECL     BX
	TESTL    BX, AX
	JNZ      mismatch

value:
	MOVQ fastStep_kind(DI), AX
	CMPQ AX, $const_kindString
	JEQ  str
	CMPQ AX, $const_kindNumber
	JEQ  num

	// The end: the line must end here.
	CMPQ    R11, R8
	JEQ     matched
	MOVBLZX (SI)(R11*1), AX
	CMPB    AL, $0x0a
	JNE     mismatch

matched:
	MOVQ R11, n+96(FP)
	MOVQ $const_resMatch, res+104(FP)
	RET

str:
	MOVQ R11, 0(R10)
	LEAQ const_plainWindow(R11), R12 // a longer string is the Go match's, in windows

strLoop:
	LEAQ     16(R11), AX
	CMPQ     AX, R8
	JA       unsure
	CMPQ     R11, R12
	JA       unsure
	MOVOU    (SI)(R11*1), X0
	SPECIALS(AX)
	TESTL    AX, AX
	JNZ      strEnd
	ADDQ     $16, R11
	JMP      strLoop

strEnd:
	BSFL    AX, AX
	ADDQ    AX, R11
	MOVBLZX (SI)(R11*1), AX
	CMPB    AL, $0x22
	JNE     unsure
	MOVQ    R11, 8(R10)
	JMP     next

num:
	MOVQ    R11, 0(R10)
	CMPQ    R11, R8
	JAE     unsure
	MOVBLZX (SI)(R11*1), AX
	CMPB    AL, $0x2d // '-'
	JNE     digits
	INCQ    R11

digits:
	MOVQ R11, R12

digitLoop:
	CMPQ    R11, R8
	JAE     numEnd
	MOVBLZX (SI)(R11*1), AX
	SUBL    $0x30, AX
	CMPL    AX, $9
	JA      numEnd
	INCQ    R11
	JMP     digitLoop

numEnd:
	MOVQ    R11, AX
	SUBQ    R12, AX
	JZ      unsure
	CMPQ    AX, $1
	JEQ     numNext
	MOVBLZX (SI)(R12*1), AX
	CMPB    AL, $0x30 // a leading zero
	JEQ     unsure

numNext:
	CMPQ    R11, R8
	JAE     numDone
	MOVBLZX (SI)(R11*1), AX
	CMPB    AL, $0x2e // '.'
	JEQ     unsure
	ORB     $0x20, AL
	CMPB    AL, $0x65 // 'e' or 'E'
	JEQ     unsure

numDone:
	MOVQ R11, 8(R10)

next:
	ADDQ $16, R10
	ADDQ $fastStep__size, DI
	DECQ R13
	JMP  step

mismatch:
	MOVQ $0, n+96(FP)
	MOVQ $const_resMismatch, res+104(FP)
	RET

unsure:
	MOVQ $0, n+96(FP)
	MOVQ $const_resUnsure, res+104(FP)
	RET
