// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/textmachine/outbox/inbox"
)

// Defaults of the collectors' options.
const (
	// DefaultGrace is how long a run keeps its series after the last scrape that saw it with lines
	// pending: twice Prometheus's default 5-minute window of rate(), so that a run that drains and
	// fills again within it keeps one unbroken series.
	DefaultGrace = 10 * time.Minute
	// DefaultTimeout bounds each scrape's reads of a database: Prometheus's default scrape timeout.
	DefaultTimeout = 10 * time.Second
)

type config struct {
	grace     time.Duration
	timeout   time.Duration
	onError   func(error)
	streamSeq func(inbox.Source) (uint64, bool)
	now       func() time.Time
}

// Option configures a collector. An invalid value makes the constructor panic, as client_golang's
// constructors do for invalid options: they are the program's own constants.
type Option func(*config) error

func newConfig(opts []Option) config {
	c := config{grace: DefaultGrace, timeout: DefaultTimeout, onError: func(error) {}, now: time.Now}
	for _, o := range opts {
		if err := o(&c); err != nil {
			panic(err)
		}
	}
	return c
}

// WithGrace sets how long a run keeps its series after the last scrape that saw it with lines
// pending (see the package documentation). 0 names only the runs with lines pending at each scrape,
// as the exporter did before the grace period: their series then come and go with the runs' lines.
func WithGrace(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("metrics: grace period %v, need >= 0", d)
		}
		c.grace = d
		return nil
	}
}

// WithTimeout bounds each scrape's reads of the database.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("metrics: timeout %v, need > 0", d)
		}
		c.timeout = d
		return nil
	}
}

// WithErrorHandler sets a function that hears of each read that failed a scrape (the scrape itself
// answers outbox_up 0). The collectors are silent without it. It must not block.
func WithErrorHandler(fn func(error)) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("metrics: nil error handler")
		}
		c.onError = fn
		return nil
	}
}

// WithStreamPositions gives the inbox collector the last stream sequence a JetStream stream source
// applied, for outbox_inbox_stream_position: fn says whether a source is a stream source and its
// sequence (from jetstream.ParseStreamPosition). Without it the series is absent, so that this
// module does not depend on NATS.
func WithStreamPositions(fn func(s inbox.Source) (seq uint64, ok bool)) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("metrics: nil stream position reader")
		}
		c.streamSeq = fn
		return nil
	}
}
