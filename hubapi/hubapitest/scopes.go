package hubapitest

import (
	"slices"
	"strings"
)

// subscopes is the part of JupyterHub 5.5's scope hierarchy
// (jupyterhub/scopes.py scope_definitions) that the fake understands.
var subscopes = map[string][]string{
	"admin:users":    {"admin:auth_state", "users", "read:roles:users", "delete:users"},
	"users":          {"read:users", "list:users", "users:activity"},
	"list:users":     {"read:users:name"},
	"read:users":     {"read:users:name", "read:users:groups", "read:users:activity"},
	"read:roles":     {"read:roles:users", "read:roles:services", "read:roles:groups"},
	"users:activity": {"read:users:activity"},
	"admin:servers":  {"admin:server_state", "servers"},
	"servers":        {"read:servers", "delete:servers"},
	"read:servers":   {"read:users:name"},
	"tokens":         {"read:tokens"},
	"admin:groups":   {"groups", "read:roles:groups", "delete:groups"},
	"groups":         {"read:groups", "list:groups"},
	"list:groups":    {"read:groups:name"},
	"read:groups":    {"read:groups:name"},
	"admin:services": {"list:services", "read:services", "read:roles:services"},
	"list:services":  {"read:services:name"},
	"read:services":  {"read:services:name"},
	"users:shares":   {"read:users:shares"},
	"groups:shares":  {"read:groups:shares"},
	"shares":         {"access:servers", "read:shares", "users:shares", "groups:shares"},
}

// selfScopes is what the metascope "self" grants a user, each filtered by !user=<name>.
var selfScopes = []string{
	"read:users", "read:users:name", "read:users:groups", "users:shares", "read:users:shares",
	"read:shares", "users:activity", "read:users:activity", "servers", "delete:servers",
	"read:servers", "tokens", "read:tokens", "access:servers",
}

// adminScopes are the scopes of the Hub's built-in admin role.
var adminScopes = []string{
	"admin-ui", "admin:users", "admin:servers", "admin:services", "tokens", "admin:groups",
	"list:services", "read:services", "read:hub", "proxy", "shutdown", "access:services",
	"access:servers", "read:roles", "read:metrics", "shares",
}

// expandScopes resolves "self" for user owners and adds every subscope,
// keeping each scope's filter.
func expandScopes(raw []string, user string) []string {
	set := map[string]struct{}{}
	var add func(s string)
	add = func(s string) {
		if _, ok := set[s]; ok {
			return
		}
		base, filter, _ := strings.Cut(s, "!")
		if base == "self" {
			if user != "" {
				for _, b := range selfScopes {
					add(b + "!user=" + user)
				}
			}
			return
		}
		set[s] = struct{}{}
		for _, sub := range subscopes[base] {
			if filter != "" {
				add(sub + "!" + filter)
			} else {
				add(sub)
			}
		}
	}
	for _, s := range raw {
		add(s)
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// target is what a scope is checked against.
type target struct {
	kind   string // "user", "server", "group", "" (unfiltered check)
	user   string
	server string
	group  string
	groups []string // groups of user, for !group= filters on users and servers
}

// grants reports whether the expanded scopes hold base for t.
func grants(scopes []string, base string, t target) bool {
	for _, s := range scopes {
		b, filter, hasFilter := strings.Cut(s, "!")
		if b != base {
			continue
		}
		if !hasFilter {
			return true
		}
		if t.kind == "" {
			continue
		}
		key, val, _ := strings.Cut(filter, "=")
		switch key {
		case "user":
			if (t.kind == "user" || t.kind == "server") && t.user == val {
				return true
			}
		case "server":
			if t.kind == "server" && t.user+"/"+t.server == val {
				return true
			}
		case "group":
			if t.kind == "group" && t.group == val {
				return true
			}
			if (t.kind == "user" || t.kind == "server") && slices.Contains(t.groups, val) {
				return true
			}
		}
	}
	return false
}

// holdsAny reports whether base is held at all, with or without a filter.
func holdsAny(scopes []string, base string) bool {
	for _, s := range scopes {
		if b, _, _ := strings.Cut(s, "!"); b == base {
			return true
		}
	}
	return false
}

// identifyScopes are added to every token of a user (jupyterhub.scopes.identify_scopes).
func identifyScopes(user string) []string {
	return []string{"read:users:name!user=" + user, "read:users:groups!user=" + user}
}
