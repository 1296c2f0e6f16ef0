package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/outbox"
)

// connectJetStream connects to a NATS server; the returned function closes the connection. A stream
// looked up through the returned context and missing names the command that creates it.
func connectJetStream(url string) (njs.JetStream, func(), error) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second), nats.Name("outbox"))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	js, err := njs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return hintJetStream{JetStream: js, url: url}, nc.Close, nil
}

// hintJetStream adds to "stream not found" the command that creates the stream, for relay and verify.
type hintJetStream struct {
	njs.JetStream
	url string
}

func (h hintJetStream) Stream(ctx context.Context, name string) (njs.Stream, error) {
	st, err := h.JetStream.Stream(ctx, name)
	if errors.Is(err, njs.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: create it with 'outbox stream create --nats %s --stream %s'", err, h.url, name)
	}
	return st, err
}

// openNATSSink connects and returns a JetStream sink on stream, and a function that closes it.
func openNATSSink(url, stream string) (outbox.Sink, func() error, error) {
	js, closeConn, err := connectJetStream(url)
	if err != nil {
		return nil, nil, err
	}
	s, err := jetstream.NewSink(js, stream)
	if err != nil {
		closeConn()
		return nil, nil, err
	}
	return s, func() error { closeConn(); return nil }, nil
}

// embeddedNATS starts a JetStream server on a loopback port with its store under dir, and creates the
// stream if it is missing, as `outbox stream create` does with one replica: the demo's settings, not a
// durable deployment's (see the README). It returns the client URL and a function that stops the server.
func embeddedNATS(ctx context.Context, dir, stream string) (string, func(), error) {
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
	if _, err := jetstream.CreateStream(ctx, js, stream); err != nil {
		stop()
		return "", nil, err
	}
	return srv.ClientURL(), stop, nil
}
