// gcbench-tok-go: tokenize a corpus with a GC-Bench merges file into a token file.
//
//	gcbench-tok-go --merges MERGES --in CORPUS --out TOKENS [--stats] [--repeat N]
//
// Exit codes (the same as gcbench-tok-rust and gcbench.tokenizer.errors):
//
//	0 ok, 1 input too large to merge, 2 bad command line, 3 merges file missing or
//	unreadable, 4 merges file corrupt, 5 corpus unreadable, 6 output not writable.
//
// An error is one line on stderr, "gcbench-tok-go: error: <path>: <message>", the path
// as given (any bytes), the operating system's reason worded as the C library and
// Python word it ("No such file or directory"). Paths are used as given, never cleaned.
//
// --stats prints one JSON line on stdout: bytes, tokens, encode_s (the fastest of
// --repeat encodes, each with a fresh encoder, so the chunk cache starts empty), MB/s
// (null when no time was measured).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"
)

const (
	exitOK            = 0
	exitTooLarge      = 1
	exitUsage         = 2
	exitMergesRead    = 3
	exitMergesCorrupt = 4
	exitCorpus        = 5
	exitOutput        = 6
)

const prog = "gcbench-tok-go"

func run(args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, args ...interface{}) int {
		fmt.Fprintf(stderr, prog+": error: "+format+"\n", args...)
		return code
	}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(stderr)
	mergesPath := fs.String("merges", "", "merges file (gcbench-bpe-merges v1)")
	inPath := fs.String("in", "", "corpus file (any bytes)")
	outPath := fs.String("out", "", "token file to write")
	stats := fs.Bool("stats", false, "print a JSON line with bytes, tokens, encode_s, mb_per_s")
	repeat := fs.Int("repeat", 1, "encode this many times (fresh encoder each), keep the fastest")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	// An empty path is a path (the OS says it does not exist), not a missing flag.
	if !given["merges"] || !given["in"] || !given["out"] || fs.NArg() != 0 || *repeat < 1 {
		fmt.Fprintf(stderr, "usage: %s --merges MERGES --in CORPUS --out TOKENS [--stats] [--repeat N]\n", prog)
		return exitUsage
	}
	raw, err := os.ReadFile(*mergesPath)
	if err != nil {
		return fail(exitMergesRead, "%s: cannot read merges file: %s", *mergesPath, osReason(err))
	}
	merges, err := ParseMerges(raw)
	if err != nil {
		return fail(exitMergesCorrupt, "%s: %v", *mergesPath, err)
	}
	corpus, err := os.ReadFile(*inPath)
	if err != nil {
		return fail(exitCorpus, "%s: cannot read corpus: %s", *inPath, osReason(err))
	}
	if len(corpus) > MaxChunk {
		if n, at := LongestChunk(corpus); n > MaxChunk {
			return fail(exitTooLarge, "%s: cannot tokenize: the pre-token at byte %d is %d bytes long, more than the %d this program merges", *inPath, at, n, MaxChunk)
		}
	}
	var ids []uint32
	best := time.Duration(1<<63 - 1)
	for r := 0; r < *repeat; r++ {
		enc := NewEncoder(merges)
		t0 := time.Now()
		ids = enc.Encode(make([]uint32, 0, len(corpus)/3+16), corpus)
		if d := time.Since(t0); d < best {
			best = d
		}
	}
	if err := WriteTokenFile(*outPath, ids, merges); err != nil {
		return fail(exitOutput, "%s: cannot write token file: %s", *outPath, osReason(err))
	}
	if *stats {
		secs := best.Seconds()
		mbPerS := "null"
		if secs > 0 {
			mbPerS = strconv.FormatFloat(float64(len(corpus))/1e6/secs, 'f', 3, 64)
		}
		fmt.Fprintf(stdout, "{\"impl\": \"go\", \"bytes\": %d, \"tokens\": %d, \"encode_s\": %.9f, \"mb_per_s\": %s}\n",
			len(corpus), len(ids), secs, mbPerS)
	}
	return exitOK
}

// osReason is the operating system's reason for err as the C library's strerror and
// Python's OSError.strerror word it: Go's text for an errno is that text in lower case
// ("no such file or directory"), so its first letter is raised.
func osReason(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		text := errno.Error()
		if text != "" && text[0] >= 'a' && text[0] <= 'z' {
			text = string(text[0]-'a'+'A') + text[1:]
		}
		return text
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
