// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/outbox"
)

// natsFlags are the connection flags of every command that talks to NATS (relay, verify, stream
// create, demo and the demo's engine), registered once by addNATSFlags so that they mean the same
// everywhere. The server and its credentials come from --nats and the authentication and TLS flags,
// or from a nats CLI context (--context), whose values the flags given override.
type natsFlags struct {
	fs                             *flag.FlagSet
	url, context, creds, nkey      string
	tlsCert, tlsKey, tlsCA, prefix string
	shown                          string // the server connected to, as messages name it
	// embedded is set by a command that starts a server of its own when none is named (the demo):
	// --subject-prefix then applies to it.
	embedded bool
}

// addNATSConnFlags registers the connection flags on fs; urlUsage is --nats's meaning in that
// command. The subject prefix stays the default: the command names no stream's lines by it.
func addNATSConnFlags(fs *flag.FlagSet, urlUsage string) *natsFlags {
	f := &natsFlags{fs: fs}
	fs.StringVar(&f.url, "nats", "", urlUsage+"; user and password (or a token) may be given in it, as nats://user:password@host:4222, and are never printed")
	fs.StringVar(&f.context, "context", "", "take the server and credentials from the nats CLI's context `name` ($XDG_CONFIG_HOME/nats/context/NAME.json, or ~/.config/nats/context/NAME.json); the flags given override its values")
	fs.StringVar(&f.creds, "creds", "", "authenticate with the user credentials (JWT and nkey seed) in `file`")
	fs.StringVar(&f.nkey, "nkey", "", "authenticate with the user nkey seed in `file`")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "present the client certificate in `file` (PEM), with --tls-key")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the client certificate's private key, in `file` (PEM)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "verify the server's certificate with the CA certificates in `file` (PEM)")
	f.prefix = jetstream.DefaultPrefix
	return f
}

// addNATSFlags is addNATSConnFlags and --subject-prefix, for the commands that publish or read a
// stream's lines under one prefix.
func addNATSFlags(fs *flag.FlagSet, urlUsage string) *natsFlags {
	f := addNATSConnFlags(fs, urlUsage)
	fs.StringVar(&f.prefix, "subject-prefix", jetstream.DefaultPrefix, "the lines' subjects are `prefix`.<run>, as the stream was created with")
	return f
}

// chosen reports whether a NATS server was named, by --nats or --context.
func (f *natsFlags) chosen() bool { return f.url != "" || f.context != "" }

// given reports whether the flag name was on the command line.
func (f *natsFlags) given(name string) bool {
	found := false
	f.fs.Visit(func(fl *flag.Flag) { found = found || fl.Name == name })
	return found
}

// problem names what is wrong with the flags as given, for a usage error; "" when nothing is. A
// connection flag without a server to connect to would be silently ignored, so it is refused.
func (f *natsFlags) problem() string {
	for _, name := range []string{"creds", "nkey", "tls-cert", "tls-key", "tls-ca", "subject-prefix"} {
		if f.given(name) && !f.chosen() && !(name == "subject-prefix" && f.embedded) {
			return fmt.Sprintf("--%s needs --nats URL or --context NAME", name)
		}
	}
	switch {
	case f.creds != "" && f.nkey != "":
		return "--creds and --nkey are two ways to authenticate: give one"
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return "--tls-cert and --tls-key go together"
	}
	return ""
}

// args renders the connection flags as given, for a child process (redact false) or for a command
// line shown to the user (redact true: the URL's user information hidden).
func (f *natsFlags) args(redact bool) []string {
	var a []string
	if f.context != "" {
		a = append(a, "--context", f.context)
	}
	if f.url != "" {
		u := f.url
		if redact {
			u = redactURL(u)
		}
		a = append(a, "--nats", u)
	}
	for _, p := range [][2]string{{"creds", f.creds}, {"nkey", f.nkey}, {"tls-cert", f.tlsCert}, {"tls-key", f.tlsKey}, {"tls-ca", f.tlsCA}} {
		if p[1] != "" {
			a = append(a, "--"+p[0], p[1])
		}
	}
	if f.prefix != jetstream.DefaultPrefix {
		a = append(a, "--subject-prefix", f.prefix)
	}
	return a
}

// connection is what connecting takes: the server URLs, the options, and how to name the server in
// a message (its URLs with any user information hidden).
type connection struct {
	url, shown string
	opts       []nats.Option
}

// resolve merges the context, if any, with the flags given, which override it. An explicit way to
// authenticate (--creds, --nkey, or user information in --nats) replaces the context's: a context's
// password must not ride along with the credentials the user chose.
func (f *natsFlags) resolve() (connection, error) {
	var c natsContext
	if f.context != "" {
		var err error
		if c, err = loadContext(f.context); err != nil {
			return connection{}, err
		}
	}
	if f.url != "" {
		c.URL = f.url
	}
	if f.creds != "" || f.nkey != "" || hasUserInfo(f.url) {
		c.User, c.Password, c.Token, c.Creds, c.NKey = "", "", "", f.creds, f.nkey
	}
	for _, p := range []struct {
		flag string
		into *string
	}{{f.tlsCert, &c.Cert}, {f.tlsKey, &c.Key}, {f.tlsCA, &c.CA}} {
		if p.flag != "" {
			*p.into = p.flag
		}
	}
	if c.URL == "" {
		c.URL = nats.DefaultURL // as the nats CLI does for a context without one
	}
	for _, p := range [][2]string{{c.Creds, "credentials file"}, {c.NKey, "nkey seed file"}, {c.Cert, "client certificate"},
		{c.Key, "client key"}, {c.CA, "CA file"}} {
		if err := regularFile(p[0], p[1]); err != nil {
			return connection{}, err
		}
	}
	if err := checkURLs(c.URL); err != nil {
		return connection{}, err
	}
	conn := connection{url: c.URL, shown: sanitize(redactURL(c.URL)), opts: []nats.Option{nats.Timeout(5 * time.Second), nats.Name("outbox")}}
	switch {
	case c.User != "":
		conn.opts = append(conn.opts, nats.UserInfo(c.User, c.Password))
	case c.Creds != "":
		conn.opts = append(conn.opts, nats.UserCredentials(c.Creds))
	case c.NKey != "":
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return connection{}, fmt.Errorf("nkey seed file %s: %w", quote(c.NKey), err)
		}
		conn.opts = append(conn.opts, o)
	}
	if c.Token != "" {
		conn.opts = append(conn.opts, nats.Token(c.Token))
	}
	if c.Cert != "" || c.Key != "" {
		if c.Cert == "" || c.Key == "" {
			return connection{}, errors.New("a client certificate needs both its certificate and its key file")
		}
		conn.opts = append(conn.opts, nats.ClientCert(c.Cert, c.Key))
	}
	if c.CA != "" {
		conn.opts = append(conn.opts, nats.RootCAs(c.CA))
	}
	return conn, nil
}

// server names the server the flags lead to, for messages: never with its user information. After a
// connection it is the URL connected to, from the flags or the context.
func (f *natsFlags) server() string {
	switch {
	case f.shown != "":
		return f.shown
	case f.url != "":
		return sanitize(redactURL(f.url))
	}
	return "the server of context " + quote(f.context)
}

// connect connects to the server; the returned function closes the connection. A stream looked up
// through the returned context and missing names the command that creates it.
func (f *natsFlags) connect(extra ...nats.Option) (njs.JetStream, func(), error) {
	c, err := f.resolve()
	if err != nil {
		return nil, nil, err
	}
	f.shown = c.shown
	nc, err := nats.Connect(c.url, append(c.opts, extra...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", c.shown, err)
	}
	js, err := njs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return hintJetStream{JetStream: js, flags: f}, nc.Close, nil
}

// connectJetStream connects to the server at url with no credentials but those in the URL.
func connectJetStream(url string) (njs.JetStream, func(), error) {
	f := addNATSFlags(flag.NewFlagSet("", flag.ContinueOnError), "")
	f.url = url
	return f.connect()
}

// hintJetStream adds to "stream not found" the command that creates the stream, for relay and verify.
type hintJetStream struct {
	njs.JetStream
	flags *natsFlags
}

func (h hintJetStream) Stream(ctx context.Context, name string) (njs.Stream, error) {
	st, err := h.JetStream.Stream(ctx, name)
	if errors.Is(err, njs.ErrStreamNotFound) {
		cmd := append([]string{"outbox", "stream", "create"}, h.flags.args(true)...)
		return nil, fmt.Errorf("%w: create it with '%s --stream %s'", err, strings.Join(cmd, " "), name)
	}
	return st, err
}

// openSink connects and returns a JetStream sink on stream with the flags' subject prefix, and
// a function that closes it.
func (f *natsFlags) openSink(stream string) (outbox.Sink, func() error, error) {
	js, closeConn, err := f.connect()
	if err != nil {
		return nil, nil, err
	}
	s, err := jetstream.NewSink(js, stream, jetstream.WithSubjectPrefix(f.prefix))
	if err != nil {
		closeConn()
		return nil, nil, err
	}
	return s, func() error { closeConn(); return nil }, nil
}

// embeddedNATS starts a JetStream server on a loopback port with its store under dir, and creates the
// stream if it is missing, with the subjects prefix.>, as `outbox stream create` does with one
// replica: the demo's settings, not a durable deployment's (docs/RELIABILITY.md). It returns the client URL
// and a function that stops the server.
func embeddedNATS(ctx context.Context, dir, stream, prefix string) (string, func(), error) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true})
	if err != nil {
		return "", nil, err
	}
	srv.Start()
	stop := func() { srv.Shutdown(); srv.WaitForShutdown() }
	if !srv.ReadyForConnections(10 * time.Second) {
		stop()
		return "", nil, errors.New("the embedded NATS server did not start")
	}
	js, closeConn, err := connectJetStream(srv.ClientURL())
	if err != nil {
		stop()
		return "", nil, err
	}
	defer closeConn()
	if _, err := jetstream.CreateStream(ctx, js, stream, jetstream.WithSubjectPrefix(prefix)); err != nil {
		stop()
		return "", nil, err
	}
	return srv.ClientURL(), stop, nil
}

// redactURL hides the user information (user and password, or a token) of each server URL in urls,
// as nats://xxxxx@host:4222. It works on the text, without parsing, so that a URL that does not parse
// is hidden too: whatever stands between a "://" (or the start) and the last '@' before the next
// "://" is hidden, so a password holding '/', '?', '#' or ',' is hidden whole, at worst with a host
// name of a list beside it.
func redactURL(urls string) string {
	var b strings.Builder
	for rest := urls; ; {
		next := strings.Index(rest, "://")
		seg := rest
		if next >= 0 {
			seg = rest[:next]
		}
		if at := strings.LastIndexByte(seg, '@'); at >= 0 {
			seg = "xxxxx" + seg[at:]
		}
		b.WriteString(seg)
		if next < 0 {
			return b.String()
		}
		b.WriteString("://")
		rest = rest[next+3:]
	}
}

func hasUserInfo(urls string) bool { return urls != "" && redactURL(urls) != urls }

// checkURLs parses each server URL as nats.go will, so that a bad one is reported here, and without
// its text: url.Parse's error quotes the URL, password and all, and its reasons quote parts of it
// ("invalid port" and what follows the last colon). The whole list is shown, redacted, since a
// password holding a comma splits into two URLs.
func checkURLs(urls string) error {
	for _, p := range strings.Split(urls, ",") {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		if u, err := url.Parse(p); err != nil || u.Host == "" {
			return fmt.Errorf("server URL %s is not a valid URL (in a password, '/', '?', '#', ',', '@' and '%%' must be percent-encoded)",
				sanitize(redactURL(urls)))
		}
	}
	return nil
}

// regularFile refuses, before anything reads it, a file of credentials or certificates that is missing,
// a directory or not a regular file: reading a named pipe would block the command for good. "" is no
// file, and passes.
func regularFile(path, what string) error {
	if path == "" {
		return nil
	}
	if err := checkFile(path, what); err != nil {
		return err
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("%s %s is not a regular file", what, quote(path))
	}
	return nil
}
