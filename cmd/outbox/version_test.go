// SPDX-License-Identifier: Apache-2.0

package main

import (
	"runtime/debug"
	"testing"
)

// The build information below has the shapes the go command records; the release check (make
// release-check) confirms the first on a binary installed with `go install …@version`.

func TestVersionNamesTheReleaseThatGoInstallAtAVersionRecorded(t *testing.T) {
	bi := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/textmachine/outbox/cmd/outbox", Version: "v0.1.0"},
		Deps: []*debug.Module{
			{Path: "github.com/nats-io/nats.go", Version: "v1.55.0"},
			{Path: libraryPath, Version: "v0.1.0"},
			{Path: "github.com/textmachine/outbox/jetstream", Version: "v0.1.0"},
		},
		Settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}},
	}
	if got := versionOf(bi); got != "v0.1.0" {
		t.Errorf("versionOf = %q, want v0.1.0", got)
	}
}

func TestVersionNamesTheLibraryReleaseTheBuildSelected(t *testing.T) {
	bi := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/textmachine/outbox/cmd/outbox", Version: "v0.1.0"},
		Deps: []*debug.Module{{Path: libraryPath, Version: "v0.1.2"}},
	}
	if got := versionOf(bi); got != "v0.1.2" {
		t.Errorf("versionOf = %q, want the library's v0.1.2", got)
	}
	bi.Deps[0] = &debug.Module{Path: libraryPath, Version: "v0.1.0", Replace: &debug.Module{Path: libraryPath, Version: "v0.1.3"}}
	if got := versionOf(bi); got != "v0.1.3" {
		t.Errorf("versionOf with a replacement = %q, want the replacement's v0.1.3", got)
	}
}

func TestVersionShowsTheVCSRevisionWhenTheBuildRecordedIt(t *testing.T) {
	const rev = "d21efa5c1b2a7e0f9b9f9d55f8e4b1c3a2d0e6f7"
	bi := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/textmachine/outbox/cmd/outbox", Version: "(devel)"},
		Deps: []*debug.Module{{Path: libraryPath, Version: "(devel)"}},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"},
		},
	}
	if got, want := versionOf(bi), "(devel) (revision "+rev+")"; got != want {
		t.Errorf("versionOf = %q, want %q", got, want)
	}
	bi.Settings[2].Value = "true"
	if got, want := versionOf(bi), "(devel) (revision "+rev+", modified)"; got != want {
		t.Errorf("versionOf of a modified tree = %q, want %q", got, want)
	}
	// A build in a clone, outside a workspace, gets a version the go command derives from the
	// revision (and its tag, when it has one).
	bi.Main.Version = "v0.0.0-20261201201255-d21efa5c1b2a+dirty"
	bi.Deps = nil
	if got, want := versionOf(bi), "v0.0.0-20261201201255-d21efa5c1b2a+dirty (revision "+rev+", modified)"; got != want {
		t.Errorf("versionOf of a clone = %q, want %q", got, want)
	}
}

func TestVersionOfAWorkspaceBuildWithoutVCSInformationIsDevel(t *testing.T) {
	bi := &debug.BuildInfo{
		Main:     debug.Module{Path: "github.com/textmachine/outbox/cmd/outbox", Version: "(devel)"},
		Deps:     []*debug.Module{{Path: libraryPath, Version: "(devel)"}, {Path: "github.com/textmachine/outbox/jetstream", Version: "(devel)"}},
		Settings: []debug.BuildSetting{{Key: "-buildvcs", Value: "false"}},
	}
	if got := versionOf(bi); got != "(devel)" {
		t.Errorf("versionOf = %q, want (devel)", got)
	}
	if got := versionOf(&debug.BuildInfo{}); got != "(devel)" {
		t.Errorf("versionOf of an empty build information = %q, want (devel)", got)
	}
}
