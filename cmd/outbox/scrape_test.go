// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// startMetrics starts `outbox metrics` on dbPath as a process of its own and returns the URL it
// serves and a function that interrupts it and returns its exit status and standard error.
func startMetrics(t *testing.T, dbPath string) (string, func() (int, string)) {
	t.Helper()
	return startMetricsWith(t, "--db", dbPath)
}

// scrape returns the samples at url, by metric and labels as written ("name{run=\"r\"}").
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v\n%s", resp.StatusCode, err, body)
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

// startMetricsWith starts `outbox metrics` with args (and --listen on a free port) as a process of
// its own, and returns the URL it serves and a function that interrupts it and returns its exit
// status and standard error.
func startMetricsWith(t *testing.T, args ...string) (string, func() (int, string)) {
	t.Helper()
	cmd := outboxCmd(t, append([]string{"metrics", "--listen", "127.0.0.1:0"}, args...)...)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("metrics printed no address: %v (%s)", err, errOut.String())
	}
	url := regexp.MustCompile(`http://\S+/metrics`).FindString(line)
	if url == "" {
		t.Fatalf("metrics printed %q", line)
	}
	return url, func() (int, string) {
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), errOut.String()
	}
}
