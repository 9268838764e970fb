// Package benchfile writes a benchmark command's result file (docs/benchmarks/*.md): a header that says when,
// on which machine, at which commit and with which flags the command ran, then the table it printed. READMEs
// link these files instead of copying numbers by hand (docs/benchmarks.md: "Each writes its table, with date,
// commit and flags, to a file under docs/benchmarks/").
package benchfile

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Header is what a result file says about its run.
type Header struct {
	// Title names the benchmark: "B2 spawn admission".
	Title string
	// Command is what writes the file again: "make bench-quota".
	Command string
	Date    time.Time
	// Machine is the CPU model, the CPUs, the memory and the system: "AMD EPYC, 2 CPUs, 23.5 GiB memory,
	// linux/amd64, Linux 6.1.0".
	Machine string
	// Commit is the checkout's short commit, with ", with uncommitted changes" when its tree differs from it.
	Commit string
	Go     string
	// Given are the flags set on the command line, All every flag's value, each as --name=value.
	Given, All []string
}

// New is the header of the command now running: the date, this machine, the commit of the checkout in the
// working directory, and fs's flags (parsed).
func New(ctx context.Context, title, command string, fs *flag.FlagSet) Header {
	given, all := Flags(fs)
	return Header{Title: title, Command: command, Date: time.Now(), Machine: Machine(), Commit: Commit(ctx, ""),
		Go: runtime.Version(), Given: given, All: all}
}

// Flags are fs's flags as --name=value: those set on the command line, and all of them (defaults included),
// each in the order of their names. Values are quoted as a shell would need them.
func Flags(fs *flag.FlagSet) (given, all []string) {
	arg := func(f *flag.Flag) string { return "--" + f.Name + "=" + shellQuote(f.Value.String()) }
	fs.Visit(func(f *flag.Flag) { given = append(given, arg(f)) })
	fs.VisitAll(func(f *flag.Flag) { all = append(all, arg(f)) })
	return given, all
}

// shellQuote is s as one shell word: as it is when it needs no quoting, else in single quotes.
func shellQuote(s string) string {
	safe := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !safe(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Machine describes this machine from /proc: the CPU model, the number of CPUs (all of the machine's, not
// only those this process may run on: the benchmarks run pinned), the memory, the system and the kernel.
func Machine() string {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	meminfo, _ := os.ReadFile("/proc/meminfo")
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return describe(string(cpuinfo), string(meminfo), strings.TrimSpace(string(release)))
}

// describe is Machine from the texts of /proc/cpuinfo, /proc/meminfo and the kernel's release ("" each where
// unknown).
func describe(cpuinfo, meminfo, release string) string {
	model, cpus := parseCPUInfo(cpuinfo)
	if model == "" {
		model = "unknown CPU"
	}
	if cpus == 0 {
		cpus = runtime.NumCPU()
	}
	parts := []string{model, plural(cpus, "CPU")}
	if mem := parseMemTotal(meminfo); mem > 0 {
		parts = append(parts, fmt.Sprintf("%.1f GiB memory", float64(mem)/(1<<30)))
	}
	system := runtime.GOOS + "/" + runtime.GOARCH
	if release != "" {
		system += ", kernel " + release
	}
	return strings.Join(append(parts, system), ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// parseCPUInfo reads the first CPU's model name ("Hardware" or "cpu model" where there is none) and counts the
// processors.
func parseCPUInfo(text string) (model string, cpus int) {
	fallback := ""
	for line := range strings.Lines(text) {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch key {
		case "processor":
			cpus++
		case "model name":
			if model == "" {
				model = value
			}
		case "Hardware", "cpu model":
			if fallback == "" {
				fallback = value
			}
		}
	}
	if model == "" {
		model = fallback
	}
	return model, cpus
}

// parseMemTotal is MemTotal of /proc/meminfo in bytes; 0 where absent.
func parseMemTotal(text string) int64 {
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// Commit is the short commit checked out in dir ("": the working directory), followed by ", with uncommitted
// changes" when the tree differs from it (git status: changed, staged or untracked files, as go build's
// vcs.modified), the result files under docs/benchmarks/ left out: a run writes one while the others it wrote
// are not committed yet; "unknown (...)" where git cannot tell.
func Commit(ctx context.Context, dir string) string {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
		}
		return strings.TrimSpace(string(out)), nil
	}
	commit, err := git("rev-parse", "--short", "HEAD")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	status, err := git("status", "--porcelain", "--", ":(top)", ":(top,exclude)"+ResultsDir)
	switch {
	case err != nil:
		return commit + ", unknown whether with uncommitted changes"
	case status != "":
		return commit + ", with uncommitted changes"
	}
	return commit
}

// ResultsDir is where the benchmark commands write their files, from the repository's root.
const ResultsDir = "docs/benchmarks"

// WriteTo writes the header as markdown: the title, what writes the file, and a table of the run's facts.
func (h Header) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", h.Title)
	fmt.Fprintf(&b, "Written by `%s`; do not edit by hand: run it again to replace this file.\n\n", h.Command)
	fmt.Fprintln(&b, "| | |")
	fmt.Fprintln(&b, "|---|---|")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, strings.ReplaceAll(v, "|", `\|`)) }
	row("date", h.Date.UTC().Format("2006-01-02 15:04 UTC"))
	row("machine", h.Machine)
	row("commit", h.Commit)
	row("Go", h.Go)
	row("flags given", code(h.Given))
	row("all flags", code(h.All))
	fmt.Fprintln(&b)
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// code is args as inline code; "none" for none.
func code(args []string) string {
	if len(args) == 0 {
		return "none"
	}
	return "`" + strings.Join(args, " ") + "`"
}

// Fence is text (a table printed in columns) as a fenced block, to show as printed (without blank lines at its
// start and end).
func Fence(text string) string {
	return "```text\n" + strings.Trim(text, "\n") + "\n```\n"
}

// WriteTable is what each benchmark command does with its printed table: nothing when path is empty (stdout
// only), else Write of the table as a fenced block, then "wrote <path>" on w.
func WriteTable(w io.Writer, path string, h Header, table string) error {
	if path == "" {
		return nil
	}
	if err := Write(path, h, Fence(table)); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nwrote %s\n", path)
	return err
}

// Write writes the result file at path: h, then body (markdown). It makes path's folder, and replaces an
// earlier file only once the new one is whole.
func Write(path string, h Header, body string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := h.WriteTo(tmp); err != nil {
		_ = tmp.Close()
		return err
	}
	if _, err := io.WriteString(tmp, body); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
