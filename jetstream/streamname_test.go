// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"strings"
	"testing"

	"github.com/textmachine/outbox/jetstream"
)

// A stream name the server would misread (a control byte, invalid UTF-8, a subject's wildcard) is
// refused before anything is sent, by CreateStream and by NewSink alike, with an error that names it.
func TestAStreamNameWithControlBytesOrInvalidUTF8IsRefusedBeforeAnythingIsSent(t *testing.T) {
	js := startServer(t).connect(t)
	ctx := context.Background()
	for _, name := range []string{"EV\x00ENTS", "EV\x1bENTS", "EV\x7fENTS", "EV\xffENTS", "EV\nENTS", "EV.ENTS", "EV>", ""} {
		if _, err := jetstream.CreateStream(ctx, js, name); err == nil || !strings.Contains(err.Error(), "invalid stream name") {
			t.Errorf("CreateStream(%q): %v, want an invalid stream name", name, err)
		}
		if _, err := jetstream.NewSink(js, name); err == nil {
			t.Errorf("NewSink(%q) succeeded", name)
		}
	}
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		t.Errorf("a stream was created: %q", n)
	}
}
