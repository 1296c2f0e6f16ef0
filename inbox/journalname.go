// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/textmachine/outbox/journal"
)

// MaxReaderNameLen bounds a reader name, as the journal's reader registry does.
const MaxReaderNameLen = 64

// WithReaderName sets the name under which ApplyJournal and FollowJournal register this inbox's
// position with the journals it reads (journal.SetReader): 1 to 64 bytes of letters, digits, '.',
// '_' and '-', not beginning with '.'. Two inboxes reading one journal need two names; the default
// gives each database its own (see ApplyJournal).
func WithReaderName(name string) Option {
	return func(c *config) error {
		if err := checkReaderName(name); err != nil {
			return err
		}
		c.readerName = name
		return nil
	}
}

// checkReaderName applies the registry's rules, so that a name it would refuse fails at Open, not
// after the first batch is committed.
func checkReaderName(name string) error {
	if name == "" || len(name) > MaxReaderNameLen || name[0] == '.' {
		return fmt.Errorf("%w: reader name %q: it must be 1 to %d bytes, not beginning with '.'", journal.ErrReaderName, name, MaxReaderNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !readerByte(name[i]) {
			return fmt.Errorf("%w: reader name %q holds byte 0x%02x: only letters, digits, '.', '_' and '-'", journal.ErrReaderName, name, name[i])
		}
	}
	return nil
}

func readerByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// ReaderName is the name this inbox registers with the sources that keep their readers' positions
// (a journal directory, a JetStream stream): WithReaderName's, or the one derived from its database.
// A program needs it to remove the reader of a database it moved or dropped
// (`outbox journal readers rm`, jetstream.ForgetReader).
func (in *Inbox) ReaderName() string { return in.readerName() }

// readerName is the name this inbox registers with a journal: WithReaderName's, or "inbox-", the
// database file's name (its bytes outside the registry's alphabet made '_', at most 40 of them),
// '-' and the first 12 hex digits of the SHA-256 of the database's absolute path with its
// symbolic links resolved. The same database keeps its name across restarts; two databases, even
// of the same file name in two directories, get two. A database moved to another directory gets
// another name: the old one's file is then a reader that no longer reads, for `outbox journal
// readers rm`.
func (in *Inbox) readerName() string {
	if in.cfg.readerName != "" {
		return in.cfg.readerName
	}
	return defaultReaderName(in.path)
}

func defaultReaderName(dbPath string) string {
	abs, err := filepath.Abs(dbPath)
	if err != nil {
		abs = dbPath
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	sum := sha256.Sum256([]byte(abs))
	base := []byte(filepath.Base(abs))
	for i, c := range base {
		if !readerByte(c) {
			base[i] = '_'
		}
	}
	b := strings.TrimLeft(string(base), ".")
	if len(b) > 40 {
		b = b[:40]
	}
	return "inbox-" + b + "-" + hex.EncodeToString(sum[:6])
}
