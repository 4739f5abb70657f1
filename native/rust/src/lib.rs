//! Byte-level BPE of GC-Bench, algorithm version 1: the Rust implementation.
//!
//! The definition is the Python reference, plugins/gcbench/tokenizer/bpe.py; its module
//! docstring documents the pre-tokenizer, the merge order and the merges file format
//! (`gcbench-bpe-merges v1`); tokfile.rs mirrors plugins/gcbench/tokenizer/tokenfile.py.
//! Every byte string must give the same ids here as there, which the shared vectors in
//! tests/vectors/ check (tests/vectors.rs). Standard library only.

pub mod sha256;
pub mod tokfile;

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

pub const MERGES_MAGIC: &str = "gcbench-bpe-merges";
pub const MERGES_VERSION: &str = "v1";
const MAX_ID: u64 = 1 << 31;
/// Chunks longer than this (bytes) are not cached.
const CACHE_MAX_CHUNK: usize = 256;
/// The chunk cache is emptied when it holds this many entries.
const CACHE_MAX_ENTRIES: usize = 1 << 18;

/// A corrupt merges file. `line` is 1-based, 0 when the fault is about the whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergesError {
    pub line: usize,
    pub msg: String,
}

impl fmt::Display for MergesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: corrupt merges file: {}", self.line, self.msg)
        } else {
            write!(f, "corrupt merges file: {}", self.msg)
        }
    }
}

impl std::error::Error for MergesError {}

fn merr(line: usize, msg: String) -> MergesError {
    MergesError { line, msg }
}

/// A parsed merges file: `pairs[k]` makes id `256 + k`.
#[derive(Debug, Clone)]
pub struct Merges {
    pub pairs: Vec<(u32, u32)>,
    /// SHA-256 of the file bytes.
    pub sha256: [u8; 32],
}

impl Merges {
    /// 256 + the number of merges.
    pub fn vocab_size(&self) -> usize {
        256 + self.pairs.len()
    }

    /// Parse and validate merges file content, as strictly as the Python reference:
    /// exact header, `<left> <right>\n` lines, decimal ids without leading zeros, ids
    /// smaller than the id being made, no two ids with the same bytes.
    pub fn parse(data: &[u8]) -> Result<Merges, MergesError> {
        if data.is_empty() {
            return Err(merr(1, "file is empty".into()));
        }
        if data[data.len() - 1] != b'\n' {
            return Err(merr(0, "file does not end with a newline (truncated?)".into()));
        }
        let lines: Vec<&[u8]> = data[..data.len() - 1].split(|&b| b == b'\n').collect();
        let header: Vec<&[u8]> = lines[0].split(|&b| b == b' ').collect();
        if header.len() != 3 || header[0] != MERGES_MAGIC.as_bytes() {
            return Err(merr(
                1,
                format!("first line must be '{} {} <count>'", MERGES_MAGIC, MERGES_VERSION),
            ));
        }
        if header[1] != MERGES_VERSION.as_bytes() {
            return Err(merr(
                1,
                format!(
                    "unsupported version {}, expected {}",
                    quote_bytes(&header[1][..header[1].len().min(20)]),
                    MERGES_VERSION
                ),
            ));
        }
        let count = parse_id(header[2], 1, "merge count")? as usize;
        if lines.len() - 1 != count {
            return Err(merr(
                0,
                format!("header announces {} merges but the file has {}", count, lines.len() - 1),
            ));
        }
        let mut tokens: Vec<Vec<u8>> = (0..256u32).map(|b| vec![b as u8]).collect();
        let mut seen: HashMap<Vec<u8>, (), FastBuild> = HashMap::default();
        for t in &tokens {
            seen.insert(t.clone(), ());
        }
        let mut pairs = Vec::with_capacity(count);
        for (k, line) in lines[1..].iter().enumerate() {
            let line_no = k + 2;
            let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            if parts.len() != 2 {
                return Err(merr(line_no, "expected two ids separated by one space".into()));
            }
            let left = parse_id(parts[0], line_no, "left id")?;
            let right = parse_id(parts[1], line_no, "right id")?;
            let new_id = 256 + k as u32;
            if left >= new_id || right >= new_id {
                return Err(merr(
                    line_no,
                    format!(
                        "merge {} ({} {}) uses an id not smaller than the id it makes ({})",
                        k, left, right, new_id
                    ),
                ));
            }
            let mut tok = tokens[left as usize].clone();
            tok.extend_from_slice(&tokens[right as usize]);
            if seen.insert(tok.clone(), ()).is_some() {
                return Err(merr(
                    line_no,
                    format!(
                        "merge {} ({} {}) makes bytes {} that an earlier id already has",
                        k,
                        left,
                        right,
                        quote_bytes(&tok[..tok.len().min(20)])
                    ),
                ));
            }
            tokens.push(tok);
            pairs.push((left, right));
        }
        Ok(Merges {
            pairs,
            sha256: sha256::sha256(data),
        })
    }
}

fn parse_id(text: &[u8], line: usize, what: &str) -> Result<u32, MergesError> {
    let bad = text.is_empty()
        || text.len() > 10
        || (text.len() > 1 && text[0] == b'0')
        || !text.iter().all(|c| c.is_ascii_digit());
    if bad {
        let shown = &text[..text.len().min(20)];
        return Err(merr(
            line,
            format!(
                "{} {} is not a decimal number without leading zeros",
                what,
                quote_bytes(shown)
            ),
        ));
    }
    let v: u64 = text.iter().fold(0u64, |acc, &c| acc * 10 + (c - b'0') as u64);
    if v >= MAX_ID {
        return Err(merr(line, format!("{} {} is too large", what, v)));
    }
    Ok(v as u32)
}

/// Bytes for an error message as the Python reference's `quote_bytes`: in double quotes,
/// printable ASCII as is (`"` and `\` escaped), any other byte as `\xNN`.
pub fn quote_bytes(b: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() + 2);
    s.push('"');
    for &c in b {
        match c {
            b'"' | b'\\' => {
                s.push('\\');
                s.push(c as char);
            }
            0x20..=0x7e => s.push(c as char),
            _ => {
                s.push_str("\\x");
                s.push(HEX[(c >> 4) as usize] as char);
                s.push(HEX[(c & 15) as usize] as char);
            }
        }
    }
    s.push('"');
    s
}

// Byte classes of the pre-tokenizer.
const CLS_L: u8 = 0; // ASCII letter or any byte >= 0x80
const CLS_D: u8 = 1; // ASCII digit
const CLS_S: u8 = 2; // ASCII whitespace: space \t \n \v \f \r
const CLS_P: u8 = 3; // anything else

const fn make_classes() -> [u8; 256] {
    let mut t = [CLS_P; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        t[b] = if c >= 0x80 || c.is_ascii_alphabetic() {
            CLS_L
        } else if c.is_ascii_digit() {
            CLS_D
        } else if c == b' ' || c == b'\t' || c == b'\n' || c == 0x0b || c == 0x0c || c == b'\r' {
            CLS_S
        } else {
            CLS_P
        };
        b += 1;
    }
    t
}

static BYTE_CLASS: [u8; 256] = make_classes();

/// End of the pre-token chunk that starts at `i` (`i < b.len()`).
#[inline]
fn next_chunk(b: &[u8], i: usize) -> usize {
    let n = b.len();
    let c = BYTE_CLASS[b[i] as usize];
    if c == CLS_S {
        if b[i] == b' ' && i + 1 < n && BYTE_CLASS[b[i + 1] as usize] != CLS_S {
            let c2 = BYTE_CLASS[b[i + 1] as usize];
            let mut j = i + 2;
            while j < n && BYTE_CLASS[b[j] as usize] == c2 {
                j += 1;
            }
            return j;
        }
        let mut j = i + 1;
        while j < n && BYTE_CLASS[b[j] as usize] == CLS_S {
            j += 1;
        }
        if j < n && j - i >= 2 && b[j - 1] == b' ' {
            j -= 1;
        }
        return j;
    }
    let mut j = i + 1;
    while j < n && BYTE_CLASS[b[j] as usize] == c {
        j += 1;
    }
    j
}

/// The pre-token chunks of `data`; concatenated they are `data`.
pub fn pretokenize(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let j = next_chunk(data, i);
        out.push(&data[i..j]);
        i = j;
    }
    out
}

/// FxHash-style hasher: SipHash (std's default) would dominate the cache lookups.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let v = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            h = (h.rotate_left(5) ^ v).wrapping_mul(SEED);
        }
        for &b in chunks.remainder() {
            h = (h.rotate_left(5) ^ b as u64).wrapping_mul(SEED);
        }
        self.0 = h;
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(SEED);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type FastBuild = BuildHasherDefault<FastHasher>;

/// Open-addressing map pair key (left << 32 | right) -> rank.
struct RankTable {
    keys: Vec<u64>,
    vals: Vec<u32>,
    mask: usize,
    shift: u32,
}

const EMPTY: u64 = u64::MAX;

impl RankTable {
    fn new(n: usize) -> RankTable {
        let mut size = 16usize;
        let mut bits = 4u32;
        while size < 2 * n + 16 {
            size <<= 1;
            bits += 1;
        }
        RankTable {
            keys: vec![EMPTY; size],
            vals: vec![0; size],
            mask: size - 1,
            shift: 64 - bits,
        }
    }

    #[inline]
    fn slot(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    fn put(&mut self, key: u64, val: u32) {
        let mut i = self.slot(key);
        while self.keys[i] != EMPTY && self.keys[i] != key {
            i = (i + 1) & self.mask;
        }
        self.keys[i] = key;
        self.vals[i] = val;
    }

    #[inline]
    fn get(&self, key: u64) -> Option<u32> {
        let mut i = self.slot(key);
        loop {
            let k = self.keys[i];
            if k == key {
                return Some(self.vals[i]);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }
}

#[inline]
fn pair_key(left: u32, right: u32) -> u64 {
    (left as u64) << 32 | right as u64
}

/// The longest pre-token chunk (bytes) an `Encoder` merges: heap entries hold rank (31
/// bits) << 33 | position (33 bits). The program refuses longer ones (see
/// `longest_chunk`), never merges them wrongly.
pub const MAX_CHUNK: u64 = (1 << 33) - 1;

/// (length, offset) of the longest pre-token chunk of `data`.
pub fn longest_chunk(data: &[u8]) -> (u64, usize) {
    let (mut longest, mut at) = (0u64, 0usize);
    let mut i = 0;
    while i < data.len() {
        let j = next_chunk(data, i);
        if (j - i) as u64 > longest {
            longest = (j - i) as u64;
            at = i;
        }
        i = j;
    }
    (longest, at)
}

/// Encodes bytes to ids with one `Merges`. Keeps a chunk cache; not shared between threads.
pub struct Encoder {
    ranks: RankTable,
    cache: HashMap<Box<[u8]>, Box<[u32]>, FastBuild>,
    // workspace of merge_chunk, reused between chunks
    ids: Vec<u32>,
    nxt: Vec<u32>,
    prv: Vec<u32>,
    nxt_wide: Vec<u64>, // positions of chunks of 2**32 - 1 bytes or more
    prv_wide: Vec<u64>,
    heap: Vec<u64>,
    wide: bool, // tests: always use the 64-bit positions
}

const NONE: u32 = u32::MAX;

/// A position in a chunk's linked list: u32 for chunks below 2**32 - 1 bytes, u64 above.
trait Pos: Copy + PartialEq {
    const NONE: Self;
    /// Bits of the position in a heap entry (the rank takes the 64 - BITS above).
    const BITS: u32;
    fn at(i: usize) -> Self;
    fn index(self) -> usize;
}

impl Pos for u32 {
    const NONE: u32 = u32::MAX;
    const BITS: u32 = 32;
    #[inline]
    fn at(i: usize) -> u32 {
        i as u32
    }
    #[inline]
    fn index(self) -> usize {
        self as usize
    }
}

impl Pos for u64 {
    const NONE: u64 = u64::MAX;
    const BITS: u32 = 33;
    #[inline]
    fn at(i: usize) -> u64 {
        i as u64
    }
    #[inline]
    fn index(self) -> usize {
        self as usize
    }
}

impl Encoder {
    pub fn new(merges: &Merges) -> Encoder {
        let mut ranks = RankTable::new(merges.pairs.len());
        for (k, &(l, r)) in merges.pairs.iter().enumerate() {
            ranks.put(pair_key(l, r), k as u32);
        }
        Encoder {
            ranks,
            cache: HashMap::default(),
            ids: Vec::new(),
            nxt: Vec::new(),
            prv: Vec::new(),
            nxt_wide: Vec::new(),
            prv_wide: Vec::new(),
            heap: Vec::new(),
            wide: false,
        }
    }

    /// Merge every chunk with 64-bit positions, as chunks of 4 GiB or more are (tests).
    #[doc(hidden)]
    pub fn force_wide_positions(&mut self) {
        self.wide = true;
    }

    /// Appends the ids of `data` to `out`. No chunk may be longer than `MAX_CHUNK`
    /// (check with `longest_chunk` when `data` is longer).
    pub fn encode_into(&mut self, data: &[u8], out: &mut Vec<u32>) {
        let mut i = 0;
        while i < data.len() {
            let j = next_chunk(data, i);
            let chunk = &data[i..j];
            i = j;
            if chunk.len() == 1 {
                out.push(chunk[0] as u32);
                continue;
            }
            if chunk.len() <= CACHE_MAX_CHUNK {
                if let Some(ids) = self.cache.get(chunk) {
                    out.extend_from_slice(ids);
                    continue;
                }
                let start = out.len();
                self.merge_chunk(chunk, out);
                if self.cache.len() >= CACHE_MAX_ENTRIES {
                    self.cache.clear();
                }
                self.cache.insert(chunk.into(), out[start..].into());
                continue;
            }
            self.merge_chunk(chunk, out);
        }
    }

    /// The ids of `data`.
    pub fn encode(&mut self, data: &[u8]) -> Vec<u32> {
        let mut out = Vec::with_capacity(data.len() / 3 + 1);
        self.encode_into(data, &mut out);
        out
    }

    /// Merge one chunk (2 <= length <= MAX_CHUNK), with u32 positions when they fit.
    fn merge_chunk(&mut self, chunk: &[u8], out: &mut Vec<u32>) {
        if (chunk.len() as u64) < u32::MAX as u64 && !self.wide {
            merge_linked(
                &self.ranks,
                chunk,
                out,
                &mut self.ids,
                &mut self.nxt,
                &mut self.prv,
                &mut self.heap,
            );
        } else {
            merge_linked(
                &self.ranks,
                chunk,
                out,
                &mut self.ids,
                &mut self.nxt_wide,
                &mut self.prv_wide,
                &mut self.heap,
            );
        }
    }
}

/// Merge one chunk: lowest rank first, then leftmost, with a linked list of symbols
/// (`nxt`, `prv`: positions, `P::NONE` at the ends) and a min-heap of rank << P::BITS |
/// position. A heap entry is stale unless the pair now at its position has its rank (a
/// rank names exactly one pair).
fn merge_linked<P: Pos>(
    ranks: &RankTable,
    chunk: &[u8],
    out: &mut Vec<u32>,
    ids: &mut Vec<u32>,
    nxt: &mut Vec<P>,
    prv: &mut Vec<P>,
    heap: &mut Vec<u64>,
) {
    let n = chunk.len();
    let pos_mask = (1u64 << P::BITS) - 1;
    ids.clear();
    nxt.clear();
    prv.clear();
    ids.extend(chunk.iter().map(|&b| b as u32));
    nxt.extend((1..=n).map(P::at));
    nxt[n - 1] = P::NONE;
    prv.push(P::NONE);
    prv.extend((0..n - 1).map(P::at));
    heap.clear();
    for i in 0..n - 1 {
        if let Some(r) = ranks.get(pair_key(ids[i], ids[i + 1])) {
            heap.push((r as u64) << P::BITS | i as u64);
        }
    }
    heap_init(heap);
    while let Some(top) = heap_pop(heap) {
        let rank = (top >> P::BITS) as u32;
        let i = (top & pos_mask) as usize;
        let j = nxt[i];
        if j == P::NONE || ids[i] == NONE {
            continue;
        }
        let j = j.index();
        if ranks.get(pair_key(ids[i], ids[j])) != Some(rank) {
            continue;
        }
        let new_id = 256 + rank;
        ids[i] = new_id;
        ids[j] = NONE;
        let k = nxt[j];
        nxt[i] = k;
        if k != P::NONE {
            prv[k.index()] = P::at(i);
            if let Some(r) = ranks.get(pair_key(new_id, ids[k.index()])) {
                heap_push(heap, (r as u64) << P::BITS | i as u64);
            }
        }
        let p = prv[i];
        if p != P::NONE {
            if let Some(r) = ranks.get(pair_key(ids[p.index()], new_id)) {
                heap_push(heap, (r as u64) << P::BITS | p.index() as u64);
            }
        }
    }
    let mut i = P::at(0);
    while i != P::NONE {
        out.push(ids[i.index()]);
        i = nxt[i.index()];
    }
}

// A binary min-heap on Vec<u64> (std's BinaryHeap is a max-heap; Reverse costs nothing,
// but building it from a reused Vec each chunk does).
fn heap_init(h: &mut [u64]) {
    let n = h.len();
    for i in (0..n / 2).rev() {
        sift_down(h, i);
    }
}

fn heap_push(h: &mut Vec<u64>, v: u64) {
    h.push(v);
    let mut i = h.len() - 1;
    while i > 0 {
        let p = (i - 1) / 2;
        if h[p] <= v {
            break;
        }
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

fn heap_pop(h: &mut Vec<u64>) -> Option<u64> {
    let last = h.pop()?;
    if h.is_empty() {
        return Some(last);
    }
    let top = h[0];
    h[0] = last;
    sift_down(h, 0);
    Some(top)
}

fn sift_down(h: &mut [u64], mut i: usize) {
    let n = h.len();
    let v = h[i];
    loop {
        let mut c = 2 * i + 1;
        if c >= n {
            break;
        }
        if c + 1 < n && h[c + 1] < h[c] {
            c += 1;
        }
        if v <= h[c] {
            break;
        }
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(s: &[u8]) -> Vec<Vec<u8>> {
        pretokenize(s).into_iter().map(|c| c.to_vec()).collect()
    }

    #[test]
    fn pretokenizer_splits_whitespace_like_the_reference() {
        assert_eq!(chunks(b"a  b"), vec![b"a".to_vec(), b" ".to_vec(), b" b".to_vec()]);
        assert_eq!(chunks(b"\t b"), vec![b"\t".to_vec(), b" b".to_vec()]);
        assert_eq!(chunks(b" \tb"), vec![b" \t".to_vec(), b"b".to_vec()]);
        assert_eq!(chunks(b"x   "), vec![b"x".to_vec(), b"   ".to_vec()]);
        assert_eq!(chunks(b"\n\nx"), vec![b"\n\n".to_vec(), b"x".to_vec()]);
        assert_eq!(
            chunks(b"12ab!! ?"),
            vec![b"12".to_vec(), b"ab".to_vec(), b"!!".to_vec(), b" ?".to_vec()]
        );
        assert_eq!(
            chunks("café ok".as_bytes()),
            vec!["café".as_bytes().to_vec(), b" ok".to_vec()]
        );
    }

    #[test]
    fn merges_apply_lowest_rank_first_then_leftmost() {
        // 256 = "a"+"a", 257 = "a"+"b"; "aaab" -> aa (rank 0 at 0), then "a"+"b" (rank 1)
        let m = Merges::parse(b"gcbench-bpe-merges v1 2\n97 97\n97 98\n").unwrap();
        assert_eq!(Encoder::new(&m).encode(b"aaab"), vec![256, 257]);
        assert_eq!(Encoder::new(&m).encode(b"aaaa"), vec![256, 256]);
        assert_eq!(Encoder::new(&m).encode(b""), Vec::<u32>::new());
    }
}
