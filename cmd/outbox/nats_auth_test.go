// SPDX-License-Identifier: Apache-2.0

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// authNATS starts a JetStream server whose options configure sets (the authentication it requires)
// and returns its client URL, with no credentials in it.
func authNATS(t *testing.T, configure func(*server.Options)) string {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	configure(opts)
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	return srv.ClientURL()
}

// withUser puts user and password into url.
func withUser(url, user, password string) string {
	return strings.Replace(url, "nats://", "nats://"+user+":"+password+"@", 1)
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// roundTrip creates the stream EVENTS, relays a book into it and verifies it, each with conn (the
// connection flags), and fails the test unless all three succeed.
func roundTrip(t *testing.T, conn ...string) {
	t.Helper()
	with := func(args ...string) []string { return append(args, conn...) }
	if code, out, errOut := cli(t, with("stream", "create", "--stream", "EVENTS")...); code != exitOK {
		t.Fatalf("stream create %v: %d %q %q", conn, code, out, errOut)
	}
	dbPath, _ := book(t)
	if code, out, errOut := cli(t, with("relay", "--db", dbPath, "--stream", "EVENTS")...); code != exitOK || !strings.Contains(out, "projected 3 lines") {
		t.Fatalf("relay %v: %d %q %q", conn, code, out, errOut)
	}
	if code, out, errOut := cli(t, with("verify", "--stream", "EVENTS")...); code != exitOK || !strings.Contains(out, "3 unique lines") {
		t.Fatalf("verify %v: %d %q %q", conn, code, out, errOut)
	}
}

// refused runs verify with conn and fails the test unless it fails to connect: the server does
// require what the test gives.
func refused(t *testing.T, why string, conn ...string) {
	t.Helper()
	code, _, errOut := cli(t, append([]string{"verify", "--stream", "EVENTS"}, conn...)...)
	if code != exitUsage || !strings.Contains(errOut, "outbox verify: connect to ") {
		t.Errorf("%s: verify %v: %d %q, want a refused connection", why, conn, code, errOut)
	}
}

func TestRelayConnectsWithCredsFile(t *testing.T) {
	// Decentralized authentication: an operator trusts an account that signs the user's JWT.
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	sysJWT, err := jwt.NewAccountClaims(spub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	resolver.Store(spub, sysJWT)
	resolver.Store(apub, accJWT)
	url := authNATS(t, func(o *server.Options) {
		o.TrustedKeys, o.AccountResolver, o.SystemAccount = []string{opub}, resolver, spub
	})
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	userJWT, err := jwt.NewUserClaims(upub).Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, t.TempDir(), "user.creds", string(creds))

	refused(t, "no credentials", "--nats", url)
	roundTrip(t, "--nats", url, "--creds", path)
}

func TestRelayConnectsWithNkeyFile(t *testing.T) {
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	seed, _ := ukp.Seed()
	url := authNATS(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: upub}} })
	path := writeFile(t, t.TempDir(), "user.nk", string(seed))

	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	refused(t, "no nkey", "--nats", url)
	refused(t, "another user's nkey", "--nats", url, "--nkey", writeFile(t, t.TempDir(), "other.nk", string(otherSeed)))
	roundTrip(t, "--nats", url, "--nkey", path)
}

func TestConnectionWithUserAndPasswordInTheURLNeverPrintsThePassword(t *testing.T) {
	const secret = "s3cret-Pa55word"
	url := authNATS(t, func(o *server.Options) { o.Users = []*server.User{{Username: "ops", Password: secret}} })
	good := withUser(url, "ops", secret)
	refused(t, "no password", "--nats", url)
	roundTrip(t, "--nats", good)

	dbPath, _ := book(t)
	dead := "nats://ops:" + secret + "@127.0.0.1:1"
	for _, args := range [][]string{
		{"stream", "create", "--nats", good, "--stream", "EVENTS"},
		{"verify", "--nats", good, "--stream", "EVENTS"},
		{"verify", "--json", "--nats", good, "--stream", "EVENTS"},
		{"relay", "--db", dbPath, "--nats", good, "--stream", "EVENTS"},
		{"relay", "--db", dbPath, "--nats", good, "--stream", "MISSING"},
		{"verify", "--json", "--nats", good, "--stream", "MISSING"},
		{"verify", "--nats", withUser(url, "ops", "wrong-"+secret), "--stream", "EVENTS"},
		{"stream", "create", "--nats", dead, "--stream", "EVENTS"},
		{"verify", "--nats", "nats://ops:" + secret + "@127.0.0.1:notaport", "--stream", "EVENTS"},
		{"verify", "--nats", "nats://ops:" + secret + "@bad host", "--stream", "EVENTS"},
		{"verify", "--nats", "nats://ops:" + secret + "/x?y#z@127.0.0.1:1", "--stream", "EVENTS"},
		{"verify", "--nats", "nats://ops:" + secret + ",x@127.0.0.1:1", "--stream", "EVENTS"},
		{"demo", "--sink", "nats", "--nats", good, "--stream", "DEMO", "--units", "20", "--crashes", "1", "--dir", filepath.Join(t.TempDir(), "demo")},
	} {
		code, out, errOut := cli(t, args...)
		if strings.Contains(out+errOut, secret) {
			t.Errorf("%s %s: exit %d, the password is printed:\n%s%s", args[0], args[len(args)-1], code, out, errOut)
		}
		if strings.Contains(out+errOut, "127.0.0.1") && !strings.Contains(out+errOut, "xxxxx@") {
			t.Errorf("%s: the server is named without its hidden user information:\n%s%s", args[0], out, errOut)
		}
	}
	// The demo's engine is given the URL, password and all, and connects with it.
	if code, _, errOut := cli(t, "stream", "create", "--nats", good, "--stream", "DEMO2", "--subject-prefix", "demo"); code != exitOK {
		t.Fatalf("stream create: %d %q", code, errOut)
	}
	code, out, errOut := cli(t, "demo", "--sink", "nats", "--nats", good, "--stream", "DEMO2", "--subject-prefix", "demo", "--units", "20", "--crashes", "1", "--dir", filepath.Join(t.TempDir(), "demo"))
	if code != exitOK || !strings.Contains(out, "OK: nothing lost") {
		t.Errorf("demo against a server that requires a password: %d %q %q", code, out, errOut)
	}
	// What verify --json says of the stream it checked.
	code, out, _ = cli(t, "verify", "--json", "--nats", good, "--stream", "EVENTS")
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK {
		t.Fatalf("verify --json: %d %v %q", code, err, out)
	}
	if rep["stream"] != "EVENTS" || rep["server"] != strings.Replace(url, "nats://", "nats://xxxxx@", 1) || rep["file"] != nil {
		t.Errorf("verify --json names the stream as %v, the server as %v, the file as %v", rep["stream"], rep["server"], rep["file"])
	}
}

func TestRelayConnectsWithATokenInTheURL(t *testing.T) {
	const token = "t0ken-secret"
	url := authNATS(t, func(o *server.Options) { o.Authorization = token })
	refused(t, "no token", "--nats", url)
	roundTrip(t, "--nats", strings.Replace(url, "nats://", "nats://"+token+"@", 1))
	code, out, errOut := cli(t, "verify", "--nats", strings.Replace(url, "nats://", "nats://wrong-"+token+"@", 1), "--stream", "EVENTS")
	if code != exitUsage || strings.Contains(out+errOut, token) {
		t.Errorf("a wrong token: %d %q %q", code, out, errOut)
	}
}

// tlsFiles writes a CA, a server certificate for 127.0.0.1 and a client certificate, all signed by
// the CA, into dir, and returns the server's TLS configuration, which requires a client certificate
// the CA signed.
func tlsFiles(t *testing.T, dir string) (caPath, certPath, keyPath string, serverTLS *tls.Config) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage) (*ecdsa.PrivateKey, []byte) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return k, der
	}
	pemOf := func(typ string, der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	keyPEM := func(k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pemOf("EC PRIVATE KEY", der)
	}
	srvKey, srvDER := issue(2, x509.ExtKeyUsageServerAuth)
	cliKey, cliDER := issue(3, x509.ExtKeyUsageClientAuth)
	caPath = writeFile(t, dir, "ca.pem", pemOf("CERTIFICATE", caDER))
	certPath = writeFile(t, dir, "client.pem", pemOf("CERTIFICATE", cliDER))
	keyPath = writeFile(t, dir, "client.key", keyPEM(cliKey))
	srvCert, err := tls.X509KeyPair([]byte(pemOf("CERTIFICATE", srvDER)), []byte(keyPEM(srvKey)))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return caPath, certPath, keyPath, &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// tlsNATS starts a server that requires TLS with a client certificate, and returns its URL and the
// client's files.
func tlsNATS(t *testing.T) (url, caPath, certPath, keyPath string) {
	t.Helper()
	caPath, certPath, keyPath, cfg := tlsFiles(t, t.TempDir())
	url = authNATS(t, func(o *server.Options) { o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = cfg, true, true, 5 })
	return url, caPath, certPath, keyPath
}

func TestRelayConnectsOverTLSWithAClientCertificate(t *testing.T) {
	url, caPath, certPath, keyPath := tlsNATS(t)
	refused(t, "no client certificate", "--nats", url, "--tls-ca", caPath)
	refused(t, "no CA for the server's certificate", "--nats", url, "--tls-cert", certPath, "--tls-key", keyPath)
	roundTrip(t, "--nats", url, "--tls-ca", caPath, "--tls-cert", certPath, "--tls-key", keyPath)
}

// natsContextFile writes the nats CLI context name under a new XDG_CONFIG_HOME, as `nats context
// save` does: every field present, most of them empty, and fields overriding those.
func natsContextFile(t *testing.T, name string, fields map[string]any) {
	t.Helper()
	ctx := map[string]any{"description": "", "url": "", "socks_proxy": "", "token": "", "user": "", "password": "",
		"creds": "", "nkey": "", "cert": "", "key": "", "ca": "", "nsc": "", "jetstream_domain": "",
		"jetstream_api_prefix": "", "jetstream_event_prefix": "", "inbox_prefix": "", "user_jwt": "", "user_seed": "",
		"color_scheme": "", "tls_first": false, "windows_cert_store": "", "windows_cert_match_by": "",
		"windows_cert_match": "", "windows_ca_certs_match": nil}
	for k, v := range fields {
		ctx[k] = v
	}
	root := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", root)
	data, _ := json.Marshal(ctx)
	if err := os.MkdirAll(filepath.Join(root, "nats", "context"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "nats", "context"), name+".json", string(data))
}

func TestContextSuppliesTheConnectionFlags(t *testing.T) {
	t.Run("user and password", func(t *testing.T) {
		url := authNATS(t, func(o *server.Options) { o.Users = []*server.User{{Username: "ops", Password: "pw"}} })
		natsContextFile(t, "prod", map[string]any{"url": url, "user": "ops", "password": "pw", "description": "the platform"})
		roundTrip(t, "--context", "prod")
	})
	t.Run("TLS files, with variables expanded", func(t *testing.T) {
		url, caPath, certPath, keyPath := tlsNATS(t)
		t.Setenv("OUTBOX_TEST_CERTS", filepath.Dir(certPath))
		natsContextFile(t, "tls", map[string]any{"url": url, "ca": caPath,
			"cert": "$OUTBOX_TEST_CERTS/" + filepath.Base(certPath), "key": "file://" + keyPath})
		roundTrip(t, "--context", "tls")
	})
	t.Run("nkey", func(t *testing.T) {
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		seed, _ := ukp.Seed()
		url := authNATS(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: upub}} })
		natsContextFile(t, "nk", map[string]any{"url": url, "nkey": writeFile(t, t.TempDir(), "u.nk", string(seed))})
		roundTrip(t, "--context", "nk")
	})
}

func TestFlagsGivenOverrideTheContext(t *testing.T) {
	url := authNATS(t, func(o *server.Options) { o.Users = []*server.User{{Username: "ops", Password: "pw"}} })
	// A context that leads nowhere: another server, a wrong password.
	natsContextFile(t, "stale", map[string]any{"url": "nats://127.0.0.1:1", "user": "ops", "password": "wrong"})
	refused(t, "the context alone", "--context", "stale")
	refused(t, "the right server, the context's password", "--context", "stale", "--nats", url)
	roundTrip(t, "--context", "stale", "--nats", withUser(url, "ops", "pw"))
}

func TestContextTheCommandCannotHonourIsRefusedByName(t *testing.T) {
	url := bareNATS(t)
	for _, tc := range []struct {
		name   string
		fields map[string]any
		want   string
	}{
		{"socks", map[string]any{"url": url, "socks_proxy": "127.0.0.1:1080"}, "sets socks_proxy, which outbox does not support"},
		{"domain", map[string]any{"url": url, "jetstream_domain": "hub", "user_jwt": "x"}, "sets jetstream_domain, user_jwt"},
		{"vault", map[string]any{"url": url, "creds": "op://vault/nats/creds"}, "field creds takes its value from op:"},
		{"env", map[string]any{"url": url, "user": "ops", "password": "env://NATS_PASSWORD"}, "field password takes its value from env:"},
		{"number", map[string]any{"url": 4222}, "field url is not a string"},
	} {
		natsContextFile(t, tc.name, tc.fields)
		code, out, errOut := cli(t, "stream", "create", "--context", tc.name, "--stream", "EVENTS")
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("context %s: %d %q %q, want exit 2 and %q", tc.name, code, out, errOut, tc.want)
		}
	}
	natsContextFile(t, "other", nil)
	for name, want := range map[string]string{"missing": "missing.json does not exist", "../other": "it must be a name, not a path", "": "need exactly one"} {
		code, _, errOut := cli(t, "verify", "--context", name, "--stream", "EVENTS")
		if code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("context %q: %d %q, want %q", name, code, errOut, want)
		}
	}
}

func TestConnectionFlagsWithoutAServerAreAUsageError(t *testing.T) {
	dbPath, jPath := book(t)
	for _, args := range [][]string{
		{"relay", "--db", dbPath, "--journal", jPath, "--creds", "user.creds"},
		{"relay", "--db", dbPath, "--journal", jPath, "--subject-prefix", "book"},
		{"verify", jPath, "--tls-ca", "ca.pem"},
		{"verify", "--nats", "nats://127.0.0.1:1", "--stream", "S", "--creds", "a", "--nkey", "b"},
		{"verify", "--nats", "nats://127.0.0.1:1", "--stream", "S", "--tls-cert", "c.pem"},
		{"stream", "create", "--stream", "S", "--nkey", "u.nk"},
		{"demo", "--nkey", "u.nk"},
		{"demo", "--sink", "file", "--subject-prefix", "book"},
	} {
		name := args[0]
		if name == "stream" {
			name = "stream create"
		}
		code, out, errOut := cli(t, args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "outbox "+name+": ") {
			t.Errorf("%v: %d %q %q, want a one-line usage error", args, code, out, errOut)
		}
	}
}

func TestRelayProjectsToAStreamCreatedWithASubjectPrefix(t *testing.T) {
	url := bareNATS(t)
	if code, out, errOut := cli(t, "stream", "create", "--nats", url, "--stream", "BOOK", "--subject-prefix", "books.eu"); code != exitOK || !strings.Contains(out, "books.eu.>") {
		t.Fatalf("stream create: %d %q %q", code, out, errOut)
	}
	dbPath, _ := book(t)
	// The default prefix is not the stream's: refused before anything is sent.
	code, _, errOut := cli(t, "relay", "--db", dbPath, "--nats", url, "--stream", "BOOK")
	if code != exitUsage || !strings.Contains(errOut, "do not capture outbox.>") {
		t.Errorf("relay without the stream's prefix: %d %q", code, errOut)
	}
	if code, out, errOut := cli(t, "relay", "--db", dbPath, "--nats", url, "--stream", "BOOK", "--subject-prefix", "books.eu"); code != exitOK || !strings.Contains(out, "projected 3 lines of 2 runs into stream BOOK") {
		t.Fatalf("relay with the stream's prefix: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, "verify", "--nats", url, "--stream", "BOOK", "--subject-prefix", "books.eu"); code != exitOK || !strings.Contains(out, "3 unique lines") {
		t.Errorf("verify with the stream's prefix: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli(t, "verify", "--nats", url, "--stream", "BOOK"); code != exitUsage || !strings.Contains(errOut, "do not capture outbox.>") {
		t.Errorf("verify without the stream's prefix: %d %q", code, errOut)
	}
	// The demo against its own server, with a prefix: the engine's sink takes it too.
	code, out, errOut := cli(t, "demo", "--sink", "nats", "--subject-prefix", "books.eu", "--units", "20", "--crashes", "1", "--dir", filepath.Join(t.TempDir(), "demo"))
	if code != exitOK || !strings.Contains(out, "OK: nothing lost") {
		t.Errorf("demo with a prefix: %d %q %q", code, out, errOut)
	}
}

func TestVerifyWithASubjectPrefixFindsALineOutsideIt(t *testing.T) {
	url := bareNATS(t)
	js, closeConn, err := connectJetStream(url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	// A stream capturing two prefixes, a line under each.
	if _, err := js.CreateStream(t.Context(), njs.StreamConfig{Name: "MIXED", Subjects: []string{"outbox.>", "other.>"}, Storage: njs.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"outbox.r", "other.r"} {
		if _, err := js.Publish(t.Context(), subj, []byte(`{"engine_run_id":"r","seq":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := cli(t, "verify", "--nats", url, "--stream", "MIXED")
	if code != exitFindings || !strings.Contains(errOut, "subject other.r, stream sequence 2: the subject is not outbox.<run>") {
		t.Errorf("verify of a line outside the prefix: %d %q %q", code, out, errOut)
	}
}

func TestRedactedServerURLsHideEveryShapeOfPassword(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                       "nats://127.0.0.1:4222",
		"nats://ops:pw@127.0.0.1:4222":                "nats://xxxxx@127.0.0.1:4222",
		"nats://t0ken@h:4222":                         "nats://xxxxx@h:4222",
		"ops:pw@h:4222":                               "xxxxx@h:4222",
		"nats://ops:p/w?x#y@h:4222":                   "nats://xxxxx@h:4222",
		"nats://ops:p@w@h:4222":                       "nats://xxxxx@h:4222",
		"nats://ops:p,w@h:4222":                       "nats://xxxxx@h:4222",
		"nats://a:1@h1:4222,tls://b:2@h2:4222":        "nats://xxxxx@h1:4222,tls://xxxxx@h2:4222",
		"nats://h1:4222,nats://b:2@h2:4222":           "nats://h1:4222,nats://xxxxx@h2:4222",
		"nats://ops:p%40w@h:4222/path":                "nats://xxxxx@h:4222/path",
		"nats://ops:pw@h:4222, nats://ops:pw@h2:4222": "nats://xxxxx@h:4222, nats://xxxxx@h2:4222",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConnectionFilesThatAreNotRegularFilesAreRefusedAtOnce(t *testing.T) {
	url := bareNATS(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no named pipes here:", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--creds", fifo}, "credentials file " + fifo + " is not a regular file"},
		{[]string{"--nkey", dir}, "nkey seed file " + dir + " is a directory"},
		{[]string{"--tls-ca", filepath.Join(dir, "none.pem")}, "CA file " + filepath.Join(dir, "none.pem") + " does not exist"},
		{[]string{"--tls-cert", fifo, "--tls-key", fifo}, "client certificate " + fifo + " is not a regular file"},
	} {
		code, _, errOut := cli(t, append([]string{"stream", "create", "--nats", url, "--stream", "S"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: %d %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
	natsContextFile(t, "pipe", nil)
	ctxFile := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "nats", "context", "pipe.json")
	os.Remove(ctxFile)
	if err := syscall.Mkfifo(ctxFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := cli(t, "stream", "create", "--context", "pipe", "--stream", "S"); code != exitUsage || !strings.Contains(errOut, "is not a regular file") {
		t.Errorf("a context that is a named pipe: %d %q", code, errOut)
	}
}

// An operator who forgets --nats, or puts the URL after the wrong flag, must not see the password
// printed back: not in an error, not in the JSON.
func TestAServerURLGivenInTheWrongPlaceIsNotPrintedWithItsPassword(t *testing.T) {
	const secret = "s3cretPW"
	url := "nats://alice:" + secret + "@127.0.0.1:1"
	dbPath := emptyBook(t)
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"verify", url},
		{"verify", "--json", url},
		{"verify", "--stream", "EVENTS", url},
		{"verify", "--context", url, "--stream", "EVENTS"},
		{"check", "--db", dbPath, "--journal", url},
		{"check", "--db", dbPath, "--journal", url, "--json"},
		{"check", "--db", url, "--journal", url, "--json"},
		{"relay", "--db", url, "--journal", "j.jsonl"},
		{"stream", "create", "--stream", "EVENTS", url},
		{"stream", "create", "--nats", url, "--stream", "EVENTS", "--replicas", url},
		{"demo", "--sink", url},
		{"stats", "--db", url},
		{"pending", "--db", dbPath, "--run", url},
		{"inbox", "stats", "--db", url},
		{"metrics", "--db", dbPath, "--listen", url},
		{"migrate", url, "--db", dbPath},
		{url},
		{"nats://" + secret + "@127.0.0.1:1"},
		{"verify", "nats://alice:p@" + secret + "@127.0.0.1:1"},
	} {
		code, out, errOut := cli(t, args...)
		if code == exitOK || strings.Contains(out+errOut, secret) {
			t.Errorf("%q: exit %d, the password printed:\n%s%s", args, code, out, errOut)
		}
	}
	if entries, _ := os.ReadDir("."); len(entries) != 0 {
		t.Errorf("files created: %v", entries)
	}
}
