package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type values struct {
	Listen   string
	Interval time.Duration
	Verbose  bool
}

func TestParsePrecedence(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		want    values
		wantErr string
	}{
		"defaults": {
			want: values{Listen: ":8080", Interval: 5 * time.Second},
		},
		"env over default": {
			env:  map[string]string{"GPUHUB_LISTEN": ":9000", "GPUHUB_INTERVAL": "1m", "GPUHUB_VERBOSE": "true"},
			want: values{Listen: ":9000", Interval: time.Minute, Verbose: true},
		},
		"flag over env": {
			args: []string{"--listen=:7000"},
			env:  map[string]string{"GPUHUB_LISTEN": ":9000"},
			want: values{Listen: ":7000", Interval: 5 * time.Second},
		},
		"empty env ignored": {
			env:  map[string]string{"GPUHUB_LISTEN": ""},
			want: values{Listen: ":8080", Interval: 5 * time.Second},
		},
		"bad env value names the variable": {
			env:     map[string]string{"GPUHUB_INTERVAL": "soon"},
			wantErr: "environment variable GPUHUB_INTERVAL",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var got values
			fs.StringVar(&got.Listen, "listen", ":8080", "address to listen on")
			fs.DurationVar(&got.Interval, "interval", 5*time.Second, "sampling interval")
			fs.BoolVar(&got.Verbose, "verbose", false, "log more")
			envs := map[string]string{"listen": "GPUHUB_LISTEN", "interval": "GPUHUB_INTERVAL", "verbose": "GPUHUB_VERBOSE"}
			err := Parse(fs, tc.args, envs, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Parse error = %v, want it to contain %q", err, tc.wantErr)
			}
			if tc.wantErr != "" {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseShowsEnvInUsage(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.String("listen", "", "address to listen on")
	if err := Parse(fs, nil, map[string]string{"listen": "GPUHUB_LISTEN"}, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("listen").Usage; got != "address to listen on [$GPUHUB_LISTEN]" {
		t.Errorf("usage = %q", got)
	}
}

func TestParseUnknownFlag(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	err := Parse(fs, nil, map[string]string{"nope": "NOPE"}, nil)
	if err == nil || !strings.Contains(err.Error(), `no flag "nope"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestList(t *testing.T) {
	tests := map[string][]string{
		"":                 nil,
		" , ,":             nil,
		"students":         {"students"},
		"a, b,,c ":         {"a", "b", "c"},
		"system:sa:jhub:x": {"system:sa:jhub:x"},
	}
	for in, want := range tests {
		if diff := cmp.Diff(want, List(in)); diff != "" {
			t.Errorf("List(%q) (-want +got):\n%s", in, diff)
		}
	}
}
