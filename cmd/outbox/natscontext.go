// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// natsContext is the part of a nats CLI context (the JSON file `nats context save` writes) that the
// command uses: the server, one way to authenticate, and TLS files.
type natsContext struct {
	URL, User, Password, Token, Creds, NKey, Cert, Key, CA string
}

// contextPath is where the nats CLI keeps the context name: $XDG_CONFIG_HOME/nats/context/NAME.json,
// or ~/.config/nats/context/NAME.json without XDG_CONFIG_HOME, on every system (as the nats CLI's
// natscontext package does; os.UserConfigDir differs on macOS).
func contextPath(name string) (string, error) {
	if name == "" || strings.Contains(name, "..") || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("context name %s: it must be a name, not a path", quote(name))
	}
	root := os.Getenv("XDG_CONFIG_HOME")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("context %s: %w", quote(name), err)
		}
		root = filepath.Join(home, ".config")
	}
	return filepath.Join(root, "nats", "context", name+".json"), nil
}

// The context's fields the command reads, those it can ignore (they do not change the connection),
// and, by omission, those it refuses when set: a setting the connection would silently lack (a SOCKS
// proxy, a JetStream domain, credentials from a password manager) must not be dropped.
var (
	contextFields = map[string]func(*natsContext) *string{
		"url": func(c *natsContext) *string { return &c.URL }, "user": func(c *natsContext) *string { return &c.User },
		"password": func(c *natsContext) *string { return &c.Password }, "token": func(c *natsContext) *string { return &c.Token },
		"creds": func(c *natsContext) *string { return &c.Creds }, "nkey": func(c *natsContext) *string { return &c.NKey },
		"cert": func(c *natsContext) *string { return &c.Cert }, "key": func(c *natsContext) *string { return &c.Key },
		"ca": func(c *natsContext) *string { return &c.CA },
	}
	contextIgnored = map[string]bool{"name": true, "description": true, "color_scheme": true}
	contextFiles   = map[string]bool{"creds": true, "nkey": true, "cert": true, "key": true, "ca": true}
)

// loadContext reads the nats CLI context name. A field outside the supported subset, set to
// anything but its empty value, is an error naming it.
func loadContext(name string) (natsContext, error) {
	var c natsContext
	path, err := contextPath(name)
	if err != nil {
		return c, err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("context %s: %s does not exist (see 'nats context ls')", quote(name), quote(path))
	}
	if err := regularFile(path, "context file"); err != nil {
		return c, fmt.Errorf("context %s: %w", quote(name), err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("context %s: %w", quote(name), err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return c, fmt.Errorf("context %s: %s is not a context's JSON: %v", quote(name), quote(path), err)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var unsupported []string
	for _, k := range keys {
		v := fields[k]
		into, ok := contextFields[k]
		switch {
		case contextIgnored[k] || emptyJSON(v):
		case !ok:
			unsupported = append(unsupported, k)
		default:
			if err := json.Unmarshal(v, into(&c)); err != nil {
				return c, fmt.Errorf("context %s: field %s is not a string", quote(name), quote(k))
			}
			if err := contextValue(k, into(&c)); err != nil {
				return c, fmt.Errorf("context %s: %w", quote(name), err)
			}
		}
	}
	if len(unsupported) > 0 {
		return c, fmt.Errorf("context %s sets %s, which outbox does not support (it reads url, user, password, token, creds, nkey, cert, key and ca): "+
			"use a context without them, or give the connection flags instead", quote(name), strings.Join(unsupported, ", "))
	}
	return c, nil
}

// contextValue prepares a field's value as the nats CLI reads it: file fields expand $VAR and a
// leading ~, and may be file:// URIs; a value that names another source of secrets (op://, nsc://,
// env://, data:) is refused, since sending the reference itself as a password would be wrong.
func contextValue(field string, v *string) error {
	scheme := ""
	if u, err := url.Parse(*v); err == nil && len(u.Scheme) >= 2 {
		scheme = strings.ToLower(u.Scheme)
	}
	switch {
	case field == "url":
		return nil
	case contextFiles[field] && scheme == "file":
		*v = strings.TrimPrefix(*v, (*v)[:len("file://")])
		return nil
	case contextFiles[field] && scheme == "":
		*v = os.ExpandEnv(*v)
		if strings.HasPrefix(*v, "~") {
			home, err := os.UserHomeDir()
			if err != nil {
				return fmt.Errorf("field %s: %w", field, err)
			}
			*v = home + (*v)[1:]
		}
		return nil
	case scheme == "op" || scheme == "nsc" || scheme == "env" || scheme == "data" || scheme == "file":
		return fmt.Errorf("field %s takes its value from %s:, which outbox does not support: give the value, or a file", field, scheme)
	}
	return nil
}

// emptyJSON reports whether a context's value is its field's empty value: the nats CLI writes every
// field, most of them empty.
func emptyJSON(v json.RawMessage) bool {
	switch string(bytes.TrimSpace(v)) {
	case `""`, "null", "false", "0", "[]", "{}":
		return true
	}
	return false
}
