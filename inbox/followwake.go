// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// followNotify is whether FollowFile watches the directory; without it, it polls alone. Benchmarks
// measure both.
var followNotify = true

// waker is what wakes a follower: a notification about its file or its directory, or the poll
// interval passing. Notifications are hints: one that is lost, or a queue that overflows, costs the
// time until the next poll, never a line, because every wake-up looks at the file itself.
type waker struct {
	path  string   // the followed file, absolute
	names []string // the names it is known by: where it really is (a symbolic link followed), and path
	poll  time.Duration
	log   *slog.Logger

	w       *fsnotify.Watcher // nil: polling alone (no watcher could be had, or none wanted)
	watched map[string]bool   // the directories watched (they may not exist yet)
	// dir: path is a journal directory, watched itself (and its parent), and every notification in
	// it is about the journal.
	dir   bool
	timer *time.Timer
}

func newWaker(path string, poll time.Duration, log *slog.Logger) *waker {
	return newWakerFor(path, false, poll, log)
}

func newWakerFor(path string, dir bool, poll time.Duration, log *slog.Logger) *waker {
	k := &waker{path: path, names: places(path), dir: dir, poll: poll, log: log, timer: time.NewTimer(poll), watched: map[string]bool{}}
	if !followNotify {
		return k
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		// Out of inotify instances, or a system without notifications: the poll still finds every line.
		log.Warn("inbox: no file notifications; polling alone", "path", path, "poll", poll, "err", err)
		return k
	}
	k.w = w
	k.watch()
	return k
}

// watch starts watching the directories, those that exist now. A directory is watched rather than
// the file, so that a file created, renamed or replaced there is seen as well as one written; the
// directory where the file really is too, when the path is a symbolic link, since a rotation
// happens there.
func (k *waker) watch() {
	if k.w == nil {
		return
	}
	for _, n := range k.names {
		dirs := []string{filepath.Dir(n)}
		if k.dir {
			dirs = append(dirs, n)
		}
		for _, dir := range dirs {
			if !k.watched[dir] {
				if err := k.w.Add(dir); err == nil {
					k.watched[dir] = true
				}
			}
		}
	}
}

func (k *waker) close() {
	k.timer.Stop()
	if k.w != nil {
		k.w.Close()
	}
}

// wait returns when the followed file may have changed (a notification about it, any creation,
// rename or removal in its directory, a notification lost), when the poll interval has passed since
// the last wait, or with ctx.Err() when ctx ends.
func (k *waker) wait(ctx context.Context) error {
	defer func() {
		k.watch() // a directory created since: watched from now on
		k.reset()
	}()
	var events <-chan fsnotify.Event
	var errs <-chan error
	if k.w != nil {
		events, errs = k.w.Events, k.w.Errors
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-k.timer.C:
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if k.relevant(ev) {
				k.drain()
				return nil
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				k.log.Debug("inbox: file notification error; looking at the file", "path", k.path, "err", err)
			}
			// Events were lost: the file is looked at now, as on every wake-up.
			k.drain()
			return nil
		}
	}
}

// relevant: a notification about the followed file, or any that changes which file a name in the
// directory is (the file the follower may be finishing was renamed to one of them).
func (k *waker) relevant(ev fsnotify.Event) bool {
	if k.dir {
		// Anything in the journal's directory, or the directory itself created, moved or removed;
		// not the rest of its parent (the inbox's own database may be there).
		name := filepath.Clean(ev.Name)
		for _, n := range k.names {
			if name == n || filepath.Dir(name) == n {
				return true
			}
		}
		return false
	}
	for _, n := range k.names {
		if filepath.Clean(ev.Name) == n {
			return true
		}
	}
	return ev.Has(fsnotify.Create) || ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Remove)
}

// drain takes the notifications already queued: the look that follows covers them.
func (k *waker) drain() {
	if k.w == nil {
		return
	}
	for {
		select {
		case <-k.w.Events:
		case <-k.w.Errors:
		default:
			return
		}
	}
}

func (k *waker) reset() {
	if !k.timer.Stop() {
		select {
		case <-k.timer.C:
		default:
		}
	}
	k.timer.Reset(k.poll)
}
