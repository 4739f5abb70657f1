// Byte-level BPE of GC-Bench, algorithm version 1: the Go implementation.
//
// The definition is the Python reference, plugins/gcbench/tokenizer/bpe.py; its module
// docstring documents the pre-tokenizer, the merge order and the merges file format
// ("gcbench-bpe-merges v1"). This file must give the same ids for every byte string,
// which the shared vectors in tests/vectors/ check (bpe_test.go).
package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strconv"
)

const (
	mergesMagic   = "gcbench-bpe-merges"
	mergesVersion = "v1"
	maxID         = 1 << 31
	// Chunks longer than this are not cached (bytes); the cache is emptied at cacheMaxEntries.
	cacheMaxChunk   = 256
	cacheMaxEntries = 1 << 18
)

// MergesError is a corrupt merges file; Line is 1-based, 0 when about the whole file.
type MergesError struct {
	Line int
	Msg  string
}

func (e *MergesError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: corrupt merges file: %s", e.Line, e.Msg)
	}
	return "corrupt merges file: " + e.Msg
}

// Merges is a parsed merges file: Pairs[k] makes id 256+k.
type Merges struct {
	Pairs  [][2]uint32
	Sha256 [32]byte // of the file bytes
}

// VocabSize is 256 + the number of merges.
func (m *Merges) VocabSize() int { return 256 + len(m.Pairs) }

// ParseMerges parses and validates merges file content, as strictly as the Python
// reference: exact header, "<left> <right>\n" lines, decimal ids without leading
// zeros, ids smaller than the id being made, no two ids with the same bytes.
func ParseMerges(data []byte) (*Merges, error) {
	if len(data) == 0 {
		return nil, &MergesError{1, "file is empty"}
	}
	if data[len(data)-1] != '\n' {
		return nil, &MergesError{0, "file does not end with a newline (truncated?)"}
	}
	lines := bytes.Split(data[:len(data)-1], []byte{'\n'})
	header := bytes.Split(lines[0], []byte{' '})
	if len(header) != 3 || string(header[0]) != mergesMagic {
		return nil, &MergesError{1, "first line must be '" + mergesMagic + " " + mergesVersion + " <count>'"}
	}
	if string(header[1]) != mergesVersion {
		return nil, &MergesError{1, fmt.Sprintf("unsupported version %s, expected %s", quoteBytes(truncate(header[1], 20)), mergesVersion)}
	}
	count, err := parseID(header[2], 1, "merge count")
	if err != nil {
		return nil, err
	}
	if len(lines)-1 != int(count) {
		return nil, &MergesError{0, fmt.Sprintf("header announces %d merges but the file has %d", count, len(lines)-1)}
	}
	m := &Merges{Pairs: make([][2]uint32, 0, count), Sha256: sha256.Sum256(data)}
	tokens := make([][]byte, 256, 256+count)
	seen := make(map[string]struct{}, 256+count)
	for b := 0; b < 256; b++ {
		tokens[b] = []byte{byte(b)}
		seen[string(tokens[b])] = struct{}{}
	}
	for k, line := range lines[1:] {
		lineNo := k + 2
		parts := bytes.Split(line, []byte{' '})
		if len(parts) != 2 {
			return nil, &MergesError{lineNo, "expected two ids separated by one space"}
		}
		left, err := parseID(parts[0], lineNo, "left id")
		if err != nil {
			return nil, err
		}
		right, err := parseID(parts[1], lineNo, "right id")
		if err != nil {
			return nil, err
		}
		newID := uint32(256 + k)
		if left >= newID || right >= newID {
			return nil, &MergesError{lineNo, fmt.Sprintf("merge %d (%d %d) uses an id not smaller than the id it makes (%d)", k, left, right, newID)}
		}
		tok := append(append([]byte{}, tokens[left]...), tokens[right]...)
		if _, dup := seen[string(tok)]; dup {
			return nil, &MergesError{lineNo, fmt.Sprintf("merge %d (%d %d) makes bytes %s that an earlier id already has", k, left, right, quoteBytes(truncate(tok, 20)))}
		}
		seen[string(tok)] = struct{}{}
		tokens = append(tokens, tok)
		m.Pairs = append(m.Pairs, [2]uint32{left, right})
	}
	return m, nil
}

func parseID(text []byte, line int, what string) (uint32, error) {
	bad := len(text) == 0 || len(text) > 10 || (len(text) > 1 && text[0] == '0')
	for _, c := range text {
		if c < '0' || c > '9' {
			bad = true
		}
	}
	if bad {
		return 0, &MergesError{line, fmt.Sprintf("%s %s is not a decimal number without leading zeros", what, quoteBytes(truncate(text, 20)))}
	}
	v, err := strconv.ParseUint(string(text), 10, 64)
	if err != nil || v >= maxID {
		return 0, &MergesError{line, fmt.Sprintf("%s %s is too large", what, text)}
	}
	return uint32(v), nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// quoteBytes writes bytes for an error message as the Python reference's quote_bytes:
// in double quotes, printable ASCII as is (" and \ escaped), any other byte as \xNN.
func quoteBytes(b []byte) string {
	const hexDigits = "0123456789abcdef"
	out := make([]byte, 0, len(b)+2)
	out = append(out, '"')
	for _, c := range b {
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c >= 0x20 && c < 0x7f:
			out = append(out, c)
		default:
			out = append(out, '\\', 'x', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return string(append(out, '"'))
}

// Byte classes of the pre-tokenizer.
const (
	clsL = iota // ASCII letter or any byte >= 0x80
	clsD        // ASCII digit
	clsS        // ASCII whitespace: space \t \n \v \f \r
	clsP        // anything else
)

var byteClass = func() (t [256]uint8) {
	for b := 0; b < 256; b++ {
		switch {
		case b >= 0x80 || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'):
			t[b] = clsL
		case b >= '0' && b <= '9':
			t[b] = clsD
		case b == ' ' || b == '\t' || b == '\n' || b == 0x0b || b == 0x0c || b == '\r':
			t[b] = clsS
		default:
			t[b] = clsP
		}
	}
	return
}()

// nextChunk returns the end of the pre-token chunk starting at i (i < len(b)).
func nextChunk(b []byte, i int) int {
	n := len(b)
	c := byteClass[b[i]]
	if c == clsS {
		if b[i] == ' ' && i+1 < n && byteClass[b[i+1]] != clsS {
			j := i + 1
			c2 := byteClass[b[j]]
			for j < n && byteClass[b[j]] == c2 {
				j++
			}
			return j
		}
		j := i
		for j < n && byteClass[b[j]] == clsS {
			j++
		}
		if j < n && j-i >= 2 && b[j-1] == ' ' {
			j--
		}
		return j
	}
	j := i + 1
	for j < n && byteClass[b[j]] == c {
		j++
	}
	return j
}

// Pretokenize splits data into chunks (for tests; Encode scans in place).
func Pretokenize(data []byte) [][]byte {
	var out [][]byte
	for i := 0; i < len(data); {
		j := nextChunk(data, i)
		out = append(out, data[i:j])
		i = j
	}
	return out
}

// Encoder encodes bytes to ids with one Merges. Not safe for concurrent use.
type Encoder struct {
	merges *Merges
	ranks  rankTable
	cache  map[string][]uint32
	// workspace of mergeChunk, reused between chunks
	ids        []int32
	nxt, prv   []int32
	nxtW, prvW []int64 // positions of chunks of 2**31 bytes or more
	heap       []uint64
	wide       bool // tests: always use the 64-bit positions
}

// MaxChunk is the longest pre-token chunk (bytes) the encoder merges: heap entries hold
// rank (31 bits) << 33 | position (33 bits). Longer ones are refused by LongestChunk's
// caller, never merged wrongly.
const MaxChunk = 1<<33 - 1

// NewEncoder prepares an encoder (rank table, empty chunk cache).
func NewEncoder(m *Merges) *Encoder {
	e := &Encoder{merges: m, cache: make(map[string][]uint32)}
	e.ranks = newRankTable(len(m.Pairs))
	for k, p := range m.Pairs {
		e.ranks.put(uint64(p[0])<<32|uint64(p[1]), uint32(k))
	}
	return e
}

// LongestChunk is the length of data's longest pre-token chunk and its offset.
func LongestChunk(data []byte) (length, offset int) {
	for i := 0; i < len(data); {
		j := nextChunk(data, i)
		if j-i > length {
			length, offset = j-i, i
		}
		i = j
	}
	return
}

// Encode appends the ids of data to out and returns it. No chunk of data may be longer
// than MaxChunk (check with LongestChunk first when len(data) > MaxChunk).
func (e *Encoder) Encode(out []uint32, data []byte) []uint32 {
	for i := 0; i < len(data); {
		j := nextChunk(data, i)
		chunk := data[i:j]
		i = j
		if len(chunk) == 1 {
			out = append(out, uint32(chunk[0]))
			continue
		}
		if len(chunk) <= cacheMaxChunk {
			if ids, ok := e.cache[string(chunk)]; ok {
				out = append(out, ids...)
				continue
			}
			start := len(out)
			out = e.mergeChunk(out, chunk)
			if len(e.cache) >= cacheMaxEntries {
				e.cache = make(map[string][]uint32)
			}
			e.cache[string(chunk)] = append([]uint32(nil), out[start:]...)
			continue
		}
		out = e.mergeChunk(out, chunk)
	}
	return out
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// mergeChunk appends the ids of one chunk (2 <= len(chunk) <= MaxChunk), with int32
// positions below 2**31 bytes and int64 ones above.
func (e *Encoder) mergeChunk(out []uint32, chunk []byte) []uint32 {
	n := len(chunk)
	if cap(e.ids) < n {
		e.ids = make([]int32, n)
	}
	if n < 1<<31-1 && !e.wide {
		if cap(e.nxt) < n {
			e.nxt = make([]int32, n)
			e.prv = make([]int32, n)
		}
		out, e.heap = mergeLinked(&e.ranks, out, chunk, e.ids[:n], e.nxt[:n], e.prv[:n], e.heap[:0], 32)
		return out
	}
	if cap(e.nxtW) < n {
		e.nxtW = make([]int64, n)
		e.prvW = make([]int64, n)
	}
	out, e.heap = mergeLinked(&e.ranks, out, chunk, e.ids[:n], e.nxtW[:n], e.prvW[:n], e.heap[:0], 33)
	return out
}

type position interface{ ~int32 | ~int64 }

// mergeLinked merges one chunk: lowest rank first, then leftmost, with a linked list of
// symbols (nxt, prv: positions, -1 at the ends) and a min-heap of rank << posBits |
// position. A heap entry is stale unless the pair now at its position has its rank (a
// rank names exactly one pair). Returns out with the chunk's ids, and the heap's buffer.
func mergeLinked[P position](ranks *rankTable, out []uint32, chunk []byte, ids []int32, nxt, prv []P, h []uint64, posBits uint) ([]uint32, []uint64) {
	n := len(chunk)
	posMask := uint64(1)<<posBits - 1
	for i := 0; i < n; i++ {
		ids[i] = int32(chunk[i])
		nxt[i] = P(i + 1)
		prv[i] = P(i - 1)
	}
	nxt[n-1] = -1
	for i := 0; i+1 < n; i++ {
		if r, ok := ranks.get(pairKey(ids[i], ids[i+1])); ok {
			h = append(h, uint64(r)<<posBits|uint64(i))
		}
	}
	heapInit(h)
	for len(h) > 0 {
		top := h[0]
		h = heapPop(h)
		rank := uint32(top >> posBits)
		i := P(top & posMask)
		j := nxt[i]
		if j < 0 || ids[i] < 0 {
			continue
		}
		if r, ok := ranks.get(pairKey(ids[i], ids[j])); !ok || r != rank {
			continue
		}
		newID := int32(256 + rank)
		ids[i] = newID
		ids[j] = -1
		k := nxt[j]
		nxt[i] = k
		if k >= 0 {
			prv[k] = i
			if r, ok := ranks.get(pairKey(newID, ids[k])); ok {
				h = heapPush(h, uint64(r)<<posBits|uint64(i))
			}
		}
		if p := prv[i]; p >= 0 {
			if r, ok := ranks.get(pairKey(ids[p], newID)); ok {
				h = heapPush(h, uint64(r)<<posBits|uint64(p))
			}
		}
	}
	for i := P(0); i >= 0; i = nxt[i] {
		out = append(out, uint32(ids[i]))
	}
	return out, h
}

// A binary min-heap of uint64 (container/heap's interface calls cost too much here).
func heapInit(h []uint64) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= v {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = v
	return h
}

func heapPop(h []uint64) []uint64 {
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	if last > 0 {
		siftDown(h, 0)
	}
	return h
}

func siftDown(h []uint64, i int) {
	n := len(h)
	v := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if v <= h[c] {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = v
}

// rankTable is an open-addressing hash map pair key -> rank (faster than a Go map).
type rankTable struct {
	keys  []uint64
	vals  []uint32
	mask  uint64
	shift uint
}

const emptyKey = ^uint64(0)

func newRankTable(n int) rankTable {
	size, bits := 16, uint(4)
	for size < 2*n+16 {
		size <<= 1
		bits++
	}
	t := rankTable{keys: make([]uint64, size), vals: make([]uint32, size), mask: uint64(size - 1), shift: 64 - bits}
	for i := range t.keys {
		t.keys[i] = emptyKey
	}
	return t
}

func (t *rankTable) slot(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> t.shift }

func (t *rankTable) put(key uint64, val uint32) {
	i := t.slot(key)
	for t.keys[i] != emptyKey && t.keys[i] != key {
		i = (i + 1) & t.mask
	}
	t.keys[i] = key
	t.vals[i] = val
}

func (t *rankTable) get(key uint64) (uint32, bool) {
	i := t.slot(key)
	for {
		k := t.keys[i]
		if k == key {
			return t.vals[i], true
		}
		if k == emptyKey {
			return 0, false
		}
		i = (i + 1) & t.mask
	}
}
