// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// A journal kept as a directory of segments: small segments here, so that three batches take three.
// Each segment is named by where its first byte lies in the journal, and each sealed one has its
// index beside it.
func ExampleOpen() {
	tmp, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "journal")

	j, err := journal.Open(dir, journal.WithSegmentSize(100))
	if err != nil {
		log.Fatal(err)
	}
	for seq := int64(1); seq <= 3; seq++ {
		line := fmt.Appendf(nil, `{"engine_run_id":"run-1","seq":%d,"type":"spend","data":{"amount":%d}}`, seq, 10*seq)
		if err := j.Append(context.Background(), "run-1", []outbox.EventLine{{Seq: seq, Line: line}}); err != nil {
			log.Fatal(err)
		}
	}
	last, _ := j.LastSeq("run-1")
	j.Close()

	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fmt.Println(e.Name())
	}
	fmt.Println("last seq:", last)
	// Output:
	// 00000000000000000000.idx
	// 00000000000000000000.jsonl
	// 00000000000000000070.idx
	// 00000000000000000070.jsonl
	// 00000000000000000140.jsonl
	// retention.state
	// last seq: 3
}
