// SPDX-License-Identifier: Apache-2.0

// Shared by plain_amd64.s and match_amd64.s.

// SPLATS loads the constants SPECIALS compares with: X1 a quote in every byte, X2 a backslash, X3
// 0x20. It clobbers AX.
#define SPLATS \
	MOVQ $0x2222222222222222, AX; \
	MOVQ AX, X1; \
	PUNPCKLQDQ X1, X1; \
	MOVQ $0x5c5c5c5c5c5c5c5c, AX; \
	MOVQ AX, X2; \
	PUNPCKLQDQ X2, X2; \
	MOVQ $0x2020202020202020, AX; \
	MOVQ AX, X3; \
	PUNPCKLQDQ X3, X3

// SPECIALS sets bit k of r when byte k of X0 is one a JSON string body cannot take as it is: a quote,
// a backslash, or a byte below 0x20 as a signed byte, which takes the control bytes and every byte of
// 0x80 and above in one comparison. It clobbers X0, X4 and X5.
#define SPECIALS(r) \
	MOVO X3, X4; \
	PCMPGTB X0, X4; \
	MOVO X0, X5; \
	PCMPEQB X1, X5; \
	POR X5, X4; \
	PCMPEQB X2, X0; \
	POR X0, X4; \
	PMOVMSKB X4, r
