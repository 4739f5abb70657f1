package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The shared vectors of tests/vectors/ (format: tests/vectors/make_vectors.py).
const vectorsDir = "../../tests/vectors"

type vectorFile struct {
	mergesFile, mergesSha string
	cases                 []vectorCase
	gens                  []vectorGen
}

type vectorCase struct {
	name  string
	input []byte
	ids   []uint32
}

type vectorGen struct {
	name, generator     string
	length, seed, count int
	idsSha              string
}

func loadVectors(t *testing.T) vectorFile {
	t.Helper()
	f, err := os.Open(filepath.Join(vectorsDir, "cases.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var v vectorFile
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	atoi := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("bad number %q in cases.txt", s)
		}
		return n
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, " ")
		switch f[0] {
		case "merges":
			v.mergesFile, v.mergesSha = f[1], f[2]
		case "case":
			c := vectorCase{name: f[1], input: []byte{}, ids: []uint32{}}
			if f[2] != "-" {
				if c.input, err = hex.DecodeString(f[2]); err != nil {
					t.Fatal(err)
				}
			}
			if f[3] != "-" {
				for _, s := range strings.Split(f[3], ",") {
					c.ids = append(c.ids, uint32(atoi(s)))
				}
			}
			v.cases = append(v.cases, c)
		case "gen":
			v.gens = append(v.gens, vectorGen{f[1], f[2], atoi(f[3]), atoi(f[4]), atoi(f[5]), f[6]})
		default:
			t.Fatalf("unknown record %q in cases.txt", f[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return v
}

func lettersLCG(length, seed int) []byte {
	out := make([]byte, length)
	x := uint32(seed)
	for i := range out {
		x = x*1664525 + 1013904223
		out[i] = 'a' + byte((x>>16)%26)
	}
	return out
}

func idsSha256(ids []uint32) string {
	buf := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(buf[4*i:], id)
	}
	s := sha256.Sum256(buf)
	return hex.EncodeToString(s[:])
}

func loadVectorMerges(t *testing.T, v vectorFile) *Merges {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vectorsDir, v.mergesFile))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseMerges(raw)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestVectorMergesLoadWithTheRecordedSha256(t *testing.T) {
	v := loadVectors(t)
	m := loadVectorMerges(t, v)
	if got := hex.EncodeToString(m.Sha256[:]); got != v.mergesSha {
		t.Fatalf("sha256 %s, vectors say %s", got, v.mergesSha)
	}
	if m.VocabSize() != 2048 {
		t.Fatalf("vocab size %d, want 2048", m.VocabSize())
	}
}

func TestEveryVectorCaseGivesTheReferenceIds(t *testing.T) {
	v := loadVectors(t)
	m := loadVectorMerges(t, v)
	if len(v.cases) < 20 {
		t.Fatalf("only %d cases read", len(v.cases))
	}
	for _, c := range v.cases {
		got := NewEncoder(m).Encode(nil, c.input)
		if fmt.Sprint(got) != fmt.Sprint(c.ids) && !(len(got) == 0 && len(c.ids) == 0) {
			t.Errorf("case %s: got %v, want %v", c.name, got, c.ids)
		}
	}
}

func TestOneMegabyteLineWithoutSpacesGivesTheReferenceIds(t *testing.T) {
	v := loadVectors(t)
	m := loadVectorMerges(t, v)
	if len(v.gens) == 0 {
		t.Fatal("no generated case in cases.txt")
	}
	for _, g := range v.gens {
		if g.generator != "letters-lcg" {
			t.Fatalf("unknown generator %s", g.generator)
		}
		got := NewEncoder(m).Encode(nil, lettersLCG(g.length, g.seed))
		if len(got) != g.count || idsSha256(got) != g.idsSha {
			t.Errorf("%s: %d ids sha %s, want %d ids sha %s", g.name, len(got), idsSha256(got), g.count, g.idsSha)
		}
	}
}

func TestCachedAndUncachedEncodingAgree(t *testing.T) {
	v := loadVectors(t)
	m := loadVectorMerges(t, v)
	enc := NewEncoder(m)
	for _, c := range v.cases {
		first := enc.Encode(nil, c.input)
		second := enc.Encode(nil, c.input) // now served from the chunk cache
		if fmt.Sprint(first) != fmt.Sprint(second) {
			t.Errorf("case %s: cache changed ids", c.name)
		}
	}
}

func TestPretokenizerSplitsWhitespaceLikeTheReference(t *testing.T) {
	cases := map[string][]string{
		"a  b":           {"a", " ", " b"},
		"\t b":           {"\t", " b"},
		" \tb":           {" \t", "b"},
		"x   ":           {"x", "   "},
		"\n\nx":          {"\n\n", "x"},
		"12ab!! ?":       {"12", "ab", "!!", " ?"},
		"caf\xc3\xa9 ok": {"caf\xc3\xa9", " ok"},
	}
	for in, want := range cases {
		var got []string
		for _, c := range Pretokenize([]byte(in)) {
			got = append(got, string(c))
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

func TestCorruptMergesFilesAreRejectedWithTheirLine(t *testing.T) {
	cases := []struct {
		name, data string
		line       int
		msg        string
	}{
		{"empty", "", 1, "empty"},
		{"no final newline", "gcbench-bpe-merges v1 1\n97 98", 0, "newline"},
		{"wrong magic", "bpe-merges v1 0\n", 1, "first line"},
		{"wrong version", "gcbench-bpe-merges v2 0\n", 1, "version"},
		{"count mismatch", "gcbench-bpe-merges v1 2\n97 98\n", 0, "announces 2"},
		{"three fields", "gcbench-bpe-merges v1 1\n97 98 99\n", 2, "two ids"},
		{"leading zero", "gcbench-bpe-merges v1 1\n097 98\n", 2, "leading zeros"},
		{"negative", "gcbench-bpe-merges v1 1\n-1 98\n", 2, "decimal"},
		{"crlf", "gcbench-bpe-merges v1 1\r\n97 98\r\n", 1, "merge count"},
		{"forward reference", "gcbench-bpe-merges v1 1\n256 98\n", 2, "not smaller"},
		{"duplicate bytes", "gcbench-bpe-merges v1 4\n97 98\n256 99\n98 99\n97 258\n", 0, ""},
	}
	for _, c := range cases {
		_, err := ParseMerges([]byte(c.data))
		var me *MergesError
		if !errors.As(err, &me) {
			t.Errorf("%s: got %v, want a MergesError", c.name, err)
			continue
		}
		if c.name == "duplicate bytes" {
			// 97 258 = "a"+"bc" = "abc", already made by 256 99 = "ab"+"c"
			if me.Line != 5 || !strings.Contains(me.Msg, "earlier id") {
				t.Errorf("duplicate bytes: got %v", me)
			}
			continue
		}
		if me.Line != c.line || !strings.Contains(me.Msg, c.msg) {
			t.Errorf("%s: got line %d %q, want line %d containing %q", c.name, me.Line, me.Msg, c.line, c.msg)
		}
	}
}

// allBytePairMerges has 65536 merges (every pair of two bytes): vocab 65792 > 65536,
// so its token files hold uint32 ids.
func allBytePairMerges() []byte {
	var b bytes.Buffer
	b.WriteString("gcbench-bpe-merges v1 65536\n")
	for l := 0; l < 256; l++ {
		for r := 0; r < 256; r++ {
			fmt.Fprintf(&b, "%d %d\n", l, r)
		}
	}
	return b.Bytes()
}

func TestTokenFileUsesUint32IdsAboveVocab65536(t *testing.T) {
	m, err := ParseMerges(allBytePairMerges())
	if err != nil {
		t.Fatal(err)
	}
	ids := NewEncoder(m).Encode(nil, []byte("abc"))
	// "abc" -> "ab" (merge 97*256+98) + "c"
	if fmt.Sprint(ids) != fmt.Sprint([]uint32{256 + 97*256 + 98, 99}) {
		t.Fatalf("ids %v", ids)
	}
	buf := TokenFileBytes(ids, m)
	if string(buf[:8]) != "GCBTOKEN" || binary.LittleEndian.Uint32(buf[12:]) != 4 ||
		binary.LittleEndian.Uint32(buf[16:]) != 65792 || binary.LittleEndian.Uint64(buf[24:]) != 2 ||
		len(buf) != 64+8 || binary.LittleEndian.Uint32(buf[64:]) != 25186 {
		t.Fatalf("header/body wrong: % x", buf)
	}
}

func TestTokenFileUsesUint16IdsAtVocab2048(t *testing.T) {
	v := loadVectors(t)
	m := loadVectorMerges(t, v)
	buf := TokenFileBytes([]uint32{1, 2047}, m)
	want := "474342544f4b454e" + "01000000" + "02000000" + "00080000" + "00000000" + "0200000000000000" + v.mergesSha + "0100" + "ff07"
	if hex.EncodeToString(buf) != want {
		t.Fatalf("got %x\nwant %s", buf, want)
	}
}

func TestSixtyFourBitPositionsGiveTheSameIdsAsThirtyTwoBitOnes(t *testing.T) {
	// Chunks of 2 GiB or more merge with int64 positions; too big to test here, so the
	// same code runs on every vector with the wide positions forced.
	v := loadVectors(t)
	m := loadVectorMerges(t, v)
	for _, c := range v.cases {
		enc := NewEncoder(m)
		enc.wide = true
		got := enc.Encode(nil, c.input)
		if fmt.Sprint(got) != fmt.Sprint(c.ids) && !(len(got) == 0 && len(c.ids) == 0) {
			t.Errorf("case %s: got %v, want %v", c.name, got, c.ids)
		}
	}
	for _, g := range v.gens {
		enc := NewEncoder(m)
		enc.wide = true
		got := enc.Encode(nil, lettersLCG(g.length, g.seed))
		if len(got) != g.count || idsSha256(got) != g.idsSha {
			t.Errorf("%s: wide positions give other ids", g.name)
		}
	}
}

func TestMergesErrorsQuoteBytesAsThePythonReference(t *testing.T) {
	cases := map[string]string{
		"gcbench-bpe-merges v1 1\n\xff\"\\ 98\n":                  `line 2: corrupt merges file: left id "\xff\"\\" is not a decimal number without leading zeros`,
		"gcbench-bpe-merges v\xc3\xa9 0\n":                        `line 1: corrupt merges file: unsupported version "v\xc3\xa9", expected v1`,
		"gcbench-bpe-merges v1 4\n97 98\n256 99\n98 99\n97 258\n": `line 5: corrupt merges file: merge 3 (97 258) makes bytes "abc" that an earlier id already has`,
	}
	for data, want := range cases {
		_, err := ParseMerges([]byte(data))
		if err == nil || err.Error() != want {
			t.Errorf("%q: got %v, want %s", data, err, want)
		}
	}
}

func TestLongestChunkFindsTheLongestPreToken(t *testing.T) {
	n, at := LongestChunk([]byte("ab   cdefg!!"))
	if n != 6 || at != 4 { // "ab", "  ", " cdefg", "!!"
		t.Fatalf("got %d at %d", n, at)
	}
}
