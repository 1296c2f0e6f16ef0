// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/inbox/migrations"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/outbox"
)

// holdInbox opens the inbox named by INBOX_TEST_DB, applies one line, says "ready" and holds the
// inbox until its standard input closes.
func holdInbox() int {
	in, err := inbox.Open(context.Background(), os.Getenv("INBOX_TEST_DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := in.Apply(context.Background(), lines("child", 1, 1), insertNothing); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

func TestASecondInboxOnTheSameFileInThisProcessIsErrLocked(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	if _, err := inbox.Open(context.Background(), path); !errors.Is(err, inbox.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if rep := mustApply(t, in, lines("r", 1, 1)); rep.Applied != 1 {
		t.Errorf("the first inbox after the refused Open: %+v", rep)
	}
	in.Close()
	in2, err := inbox.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	in2.Close()
}

func TestASecondInboxOnTheSameFileInAnotherProcessIsErrLocked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "consumer.db")
	child := crashtest.Child(t, "hold-inbox", "INBOX_TEST_DB="+path)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	defer stdin.Close()
	if l, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("child: %q, %v", l, err)
	}
	if _, err := inbox.Open(context.Background(), path); !errors.Is(err, inbox.ErrLocked) {
		t.Fatalf("Open beside another process: %v, want ErrLocked", err)
	}
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	in, err := inbox.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open after the child ended: %v", err)
	}
	defer in.Close()
	if p := position(t, in, "child"); p != 1 {
		t.Errorf("the child's line: position %d", p)
	}
}

func TestOpenRefusesADatabaseHoldingTheOutboxsTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	before, _ := os.ReadFile(path)
	if _, err := inbox.Open(ctx, path); !errors.Is(err, inbox.ErrOutboxDatabase) {
		t.Fatalf("Open of a book: %v, want ErrOutboxDatabase", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Error("the refused Open changed the book")
	}
	// Nothing held: the book opens as a book again.
	s, err = outbox.Open(ctx, path)
	if err != nil {
		t.Fatalf("the book after the refused Open: %v", err)
	}
	s.Close()
}

func TestOpenRefusesAHardLinkedFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	in.Close()
	if err := os.Link(path, path+".2"); err != nil {
		t.Skip(err)
	}
	if _, err := inbox.Open(ctx, path); !errors.Is(err, inbox.ErrHardLinked) {
		t.Fatalf("Open: %v, want ErrHardLinked", err)
	}
	os.Remove(path + ".2")
	in, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open with one name again: %v", err)
	}
	in.Close()
}

func TestOpenRefusesAFileThatIsNotADatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "notes.txt")
	content := []byte("these are not the pages of an SQLite database, but a file of notes that is long enough\n")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.Open(context.Background(), path); err == nil {
		t.Fatal("Open of a text file succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != string(content) {
		t.Error("the refused Open changed the file")
	}
}

func TestMigrationsKeepTheirOwnVersionTableAndGoDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	mustApply(t, in, lines("r", 1, 3))
	in.Close()
	d := rawDBRW(t, path)
	if n := count(t, d, `SELECT count(*) FROM sqlite_schema WHERE name IN ('goose_db_version', 'outbox_db_version')`); n != 0 {
		t.Errorf("%d foreign version tables", n)
	}
	if n := count(t, d, `SELECT count(*) FROM `+migrations.TableName+` WHERE version_id = 1 AND is_applied`); n != 1 {
		t.Errorf("version 1 recorded %d times", n)
	}
	// What the goose CLI does with -dir inbox/migrations -table inbox_db_version: the files on disk.
	p, err := goose.NewProvider(goose.DialectSQLite3, d, os.DirFS("migrations"),
		goose.WithDisableGlobalRegistry(true), goose.WithTableName(migrations.TableName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	if n := count(t, d, `SELECT count(*) FROM sqlite_schema WHERE name LIKE 'inbox_%' AND name <> ?`, migrations.TableName); n != 0 {
		t.Errorf("%d inbox objects left after down", n)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	d.Close()
	in, err = inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if rep := mustApply(t, in, lines("new", 1, 1)); rep.Applied != 1 {
		t.Errorf("after down and up: %+v", rep)
	}
}

func TestOpenRefusesADatabaseOfANewerInboxSchema(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	in.Close()
	d := rawDBRW(t, path)
	if _, err := d.Exec(`INSERT INTO ` + migrations.TableName + ` (version_id, is_applied) VALUES (99, 1)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := inbox.Open(context.Background(), path); !errors.Is(err, migrations.ErrSchemaMismatch) {
		t.Fatalf("Open: %v, want ErrSchemaMismatch", err)
	}
}
