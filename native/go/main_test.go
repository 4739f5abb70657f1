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

func TestFileNamesThatAreNotUTF8AreReadWrittenAndReportedByteForByte(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus-\xff\xfe.txt")
	os.WriteFile(corpus, []byte("hello world"), 0o644)
	out := filepath.Join(dir, "out-\x80.tok")
	merges := filepath.Join(vectorsDir, "merges.txt")
	if code, _, stderr := runCLI("--merges", merges, "--in", corpus, "--out", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if data, err := os.ReadFile(out); err != nil || !bytes.HasPrefix(data, []byte("GCBTOKEN")) {
		t.Fatalf("token file: %v", err)
	}
	missing := filepath.Join(dir, "missing-\xff.txt")
	code, _, stderr := runCLI("--merges", merges, "--in", missing, "--out", out)
	want := "gcbench-tok-go: error: " + missing + ": cannot read corpus: No such file or directory\n"
	if code != 5 || stderr != want {
		t.Fatalf("exit %d stderr %q, want 5 %q", code, stderr, want)
	}
}

func TestAnOutputPathNamingAFolderIsRefusedAsADirectory(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "c.txt")
	os.WriteFile(corpus, nil, 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	for _, out := range []string{filepath.Join(dir, "sub"), dir + "/sub/", dir + "/.", dir + "/.."} {
		code, _, stderr := runCLI("--merges", filepath.Join(vectorsDir, "merges.txt"), "--in", corpus, "--out", out)
		if code != 6 || !strings.HasSuffix(stderr, ": cannot write token file: Is a directory\n") {
			t.Errorf("%s: exit %d stderr %q", out, code, stderr)
		}
	}
}

func TestAnEmptyPathIsAMissingFileNotAMissingFlag(t *testing.T) {
	code, _, stderr := runCLI("--merges", filepath.Join(vectorsDir, "merges.txt"), "--in", "", "--out", filepath.Join(t.TempDir(), "o.tok"))
	if code != 5 || !strings.HasSuffix(stderr, "error: : cannot read corpus: No such file or directory\n") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}

func TestAnEmptyCorpusGivesATokenFileOfNoIdsAndValidStats(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "empty.txt")
	os.WriteFile(corpus, nil, 0o644)
	out := filepath.Join(dir, "o.tok")
	code, stdout, stderr := runCLI("--merges", filepath.Join(vectorsDir, "merges.txt"), "--in", corpus, "--out", out, "--stats")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, `"bytes": 0, "tokens": 0`) || strings.Contains(stdout, "Inf") || strings.Contains(stdout, "NaN") {
		t.Fatalf("stats %q", stdout)
	}
	if data, _ := os.ReadFile(out); len(data) != 64 {
		t.Fatalf("token file of %d bytes, want the 64-byte header", len(data))
	}
}
