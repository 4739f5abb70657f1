// gcbench-tok-go: tokenize a corpus with a GC-Bench merges file into a token file.
//
//	gcbench-tok-go --merges MERGES --in CORPUS --out TOKENS [--stats] [--repeat N]
//
// Exit codes (the same as gcbench-tok-rust and gcbench.tokenizer.errors):
//
//	0 ok, 2 bad command line, 3 merges file missing or unreadable, 4 merges file
//	corrupt, 5 corpus unreadable, 6 output not writable.
//
// --stats prints one JSON line on stdout: bytes, tokens, encode_s (the fastest of
// --repeat encodes, each with a fresh encoder, so the chunk cache starts empty), MB/s.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

const (
	exitOK            = 0
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
	if *mergesPath == "" || *inPath == "" || *outPath == "" || fs.NArg() != 0 || *repeat < 1 {
		fmt.Fprintf(stderr, "usage: %s --merges MERGES --in CORPUS --out TOKENS [--stats] [--repeat N]\n", prog)
		return exitUsage
	}
	raw, err := os.ReadFile(*mergesPath)
	if err != nil {
		return fail(exitMergesRead, "%s: cannot read merges file: %v", *mergesPath, unwrapPathError(err))
	}
	merges, err := ParseMerges(raw)
	if err != nil {
		return fail(exitMergesCorrupt, "%s: %v", *mergesPath, err)
	}
	corpus, err := os.ReadFile(*inPath)
	if err != nil {
		return fail(exitCorpus, "%s: cannot read corpus: %v", *inPath, unwrapPathError(err))
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
		return fail(exitOutput, "%s: cannot write token file: %v", *outPath, unwrapPathError(err))
	}
	if *stats {
		secs := best.Seconds()
		fmt.Fprintf(stdout, "{\"impl\": \"go\", \"bytes\": %d, \"tokens\": %d, \"encode_s\": %.6f, \"mb_per_s\": %.3f}\n",
			len(corpus), len(ids), secs, float64(len(corpus))/1e6/secs)
	}
	return exitOK
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
