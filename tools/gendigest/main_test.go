// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// repo makes a git repository holding a small copy of the files sqlc reads and writes.
func repo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"sqlc.yaml":                    "version: \"2\"\n",
		"tools/go.mod":                 "module tools\n",
		"tools/go.sum":                 "",
		"queries/q.sql":                "-- name: Q :one\nSELECT 1;\n",
		"migrations/00001_a.sql":       "-- +goose Up\nCREATE TABLE a (x);\n",
		"migrations/migrations.go":     "package migrations\n",
		"inbox/queries/q.sql":          "-- name: R :one\nSELECT 2;\n",
		"inbox/migrations/00001_b.sql": "-- +goose Up\nCREATE TABLE b (y);\n",
		"db/q.sql.go":                  "package db\n",
		"inbox/internal/db/q.sql.go":   "package db\n",
		"outbox/store.go":              "package outbox\n",
		"ignored/build/output.bin":     "x",
		".gitignore":                   "ignored/\n",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Skipf("git init: %v %s", err, out)
	}
	return dir
}

func record(t *testing.T, dir string) string {
	t.Helper()
	list, err := digests(dir)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestTheRecordChangesWhenWhatSqlcReadsOrWritesChangesAndOnlyThen(t *testing.T) {
	for _, c := range []struct {
		name    string
		change  func(dir string) error
		changes bool
	}{
		{"a query", func(d string) error { return appendTo(d, "queries/q.sql") }, true},
		{"a migration", func(d string) error { return appendTo(d, "migrations/00001_a.sql") }, true},
		{"an inbox query", func(d string) error { return appendTo(d, "inbox/queries/q.sql") }, true},
		{"an inbox migration", func(d string) error { return appendTo(d, "inbox/migrations/00001_b.sql") }, true},
		{"sqlc.yaml", func(d string) error { return appendTo(d, "sqlc.yaml") }, true},
		{"the pinned sqlc", func(d string) error { return appendTo(d, "tools/go.sum") }, true},
		{"a generated file edited by hand", func(d string) error { return appendTo(d, "db/q.sql.go") }, true},
		{"a stray file where sqlc generates", func(d string) error {
			return os.WriteFile(filepath.Join(d, "inbox/internal/db/extra.go"), []byte("package db\n"), 0o644)
		}, true},
		{"a query renamed", func(d string) error {
			return os.Rename(filepath.Join(d, "queries/q.sql"), filepath.Join(d, "queries/r.sql"))
		}, true},
		{"the library's code", func(d string) error { return appendTo(d, "outbox/store.go") }, false},
		{"a Go file beside the migrations", func(d string) error { return appendTo(d, "migrations/migrations.go") }, false},
		{"an ignored file", func(d string) error { return appendTo(d, "ignored/build/output.bin") }, false},
		{"the record itself", func(d string) error {
			return os.WriteFile(filepath.Join(d, filepath.FromSlash(Record)), []byte("anything"), 0o644)
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := repo(t)
			before := record(t, dir)
			if err := c.change(dir); err != nil {
				t.Fatal(err)
			}
			if after := record(t, dir); (after != before) != c.changes {
				t.Errorf("record changed: %v, want %v", after != before, c.changes)
			}
		})
	}
}

func appendTo(dir, name string) error {
	f, err := os.OpenFile(filepath.Join(dir, filepath.FromSlash(name)), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString("-- changed\n")
	return err
}
