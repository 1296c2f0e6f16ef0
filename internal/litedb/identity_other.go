// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package litedb

func enter() int64 { return stackGoroutineID() }

func leave() {}

func atHere(is func(me int64) bool) bool { return is(stackGoroutineID()) }
