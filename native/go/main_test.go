package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCommandLineExitCodesNameEachFault(t *testing.T) {
	dir := t.TempDir()
	merges := filepath.Join(vectorsDir, "merges.txt")
	corpus := filepath.Join(dir, "corpus.txt")
	os.WriteFile(corpus, []byte("hello world"), 0o644)
	corrupt := filepath.Join(dir, "corrupt.txt")
	os.WriteFile(corrupt, []byte("gcbench-bpe-merges v1 5\n97 98\n"), 0o644)
	out := filepath.Join(dir, "out.tok")
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"usage", []string{"--merges", merges}, 2, "usage"},
		{"missing merges", []string{"--merges", filepath.Join(dir, "nope.txt"), "--in", corpus, "--out", out}, 3, "cannot read merges file"},
		{"corrupt merges", []string{"--merges", corrupt, "--in", corpus, "--out", out}, 4, "corrupt merges file"},
		{"unreadable corpus", []string{"--merges", merges, "--in", filepath.Join(dir, "none"), "--out", out}, 5, "cannot read corpus"},
		{"unwritable output", []string{"--merges", merges, "--in", corpus, "--out", filepath.Join(dir, "no", "such", "dir.tok")}, 6, "cannot write token file"},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(c.args...)
		if code != c.code || (c.name != "usage" && !strings.Contains(stderr, c.msg)) || (c.name == "usage" && !strings.Contains(stderr, "usage")) {
			t.Errorf("%s: exit %d stderr %q, want exit %d with %q", c.name, code, stderr, c.code, c.msg)
		}
	}
}

func TestCommandLineWritesTheTokenFileAndStats(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	os.WriteFile(corpus, []byte("hello world"), 0o644)
	out := filepath.Join(dir, "out.tok")
	code, stdout, stderr := runCLI("--merges", filepath.Join(vectorsDir, "merges.txt"), "--in", corpus, "--out", out, "--stats", "--repeat", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(data, []byte("GCBTOKEN")) {
		t.Fatalf("token file: %v", err)
	}
	if !strings.Contains(stdout, "\"bytes\": 11") {
		t.Fatalf("stats line %q", stdout)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".out.tok.tmp*"))
	if len(leftovers) != 0 {
		t.Fatalf("temp file left: %v", leftovers)
	}
}
