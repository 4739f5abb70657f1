//! The shared vectors of tests/vectors/ (format: tests/vectors/make_vectors.py),
//! checked against this crate's encoder and token file writer.

use gcbench_tok::sha256::{sha256, to_hex};
use gcbench_tok::tokfile::token_file_bytes;
use gcbench_tok::{Encoder, Merges};
use std::path::PathBuf;

struct Vectors {
    merges_file: String,
    merges_sha: String,
    cases: Vec<(String, Vec<u8>, Vec<u32>)>,
    gens: Vec<(String, String, usize, u32, usize, String)>,
}

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

fn from_hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn load_vectors() -> Vectors {
    let text = std::fs::read_to_string(vectors_dir().join("cases.txt")).expect("tests/vectors/cases.txt");
    let mut v = Vectors {
        merges_file: String::new(),
        merges_sha: String::new(),
        cases: vec![],
        gens: vec![],
    };
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "merges" => {
                v.merges_file = f[1].to_string();
                v.merges_sha = f[2].to_string();
            }
            "case" => {
                let input = if f[2] == "-" { vec![] } else { from_hex(f[2]) };
                let ids = if f[3] == "-" {
                    vec![]
                } else {
                    f[3].split(',').map(|s| s.parse().expect("id")).collect()
                };
                v.cases.push((f[1].to_string(), input, ids));
            }
            "gen" => v.gens.push((
                f[1].to_string(),
                f[2].to_string(),
                f[3].parse().unwrap(),
                f[4].parse().unwrap(),
                f[5].parse().unwrap(),
                f[6].to_string(),
            )),
            other => panic!("unknown record {:?} in cases.txt", other),
        }
    }
    v
}

fn load_merges(v: &Vectors) -> Merges {
    let raw = std::fs::read(vectors_dir().join(&v.merges_file)).expect("merges file");
    Merges::parse(&raw).expect("valid merges")
}

fn letters_lcg(length: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..length)
        .map(|_| {
            x = x.wrapping_mul(1664525).wrapping_add(1013904223);
            b'a' + ((x >> 16) % 26) as u8
        })
        .collect()
}

fn ids_sha256(ids: &[u32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    to_hex(&sha256(&bytes))
}

#[test]
fn vector_merges_load_with_the_recorded_sha256() {
    let v = load_vectors();
    let m = load_merges(&v);
    assert_eq!(to_hex(&m.sha256), v.merges_sha);
    assert_eq!(m.vocab_size(), 2048);
}

#[test]
fn every_vector_case_gives_the_reference_ids() {
    let v = load_vectors();
    let m = load_merges(&v);
    assert!(v.cases.len() >= 20, "only {} cases read", v.cases.len());
    for (name, input, ids) in &v.cases {
        assert_eq!(&Encoder::new(&m).encode(input), ids, "case {}", name);
    }
}

#[test]
fn cached_and_uncached_encoding_agree() {
    let v = load_vectors();
    let m = load_merges(&v);
    let mut enc = Encoder::new(&m);
    for (name, input, ids) in &v.cases {
        assert_eq!(&enc.encode(input), ids, "case {} (first)", name);
        assert_eq!(&enc.encode(input), ids, "case {} (cached)", name);
    }
}

#[test]
fn one_megabyte_line_without_spaces_gives_the_reference_ids() {
    let v = load_vectors();
    let m = load_merges(&v);
    assert!(!v.gens.is_empty());
    for (name, generator, length, seed, count, sha) in &v.gens {
        assert_eq!(generator, "letters-lcg");
        let ids = Encoder::new(&m).encode(&letters_lcg(*length, *seed));
        assert_eq!(ids.len(), *count, "{}", name);
        assert_eq!(&ids_sha256(&ids), sha, "{}", name);
    }
}

#[test]
fn token_file_uses_uint16_ids_at_vocab_2048() {
    let v = load_vectors();
    let m = load_merges(&v);
    let want = format!(
        "474342544f4b454e{}{}{}{}{}{}{}{}",
        "01000000", "02000000", "00080000", "00000000", "0200000000000000", v.merges_sha, "0100", "ff07"
    );
    assert_eq!(to_hex(&token_file_bytes(&[1, 2047], &m)), want);
}

#[test]
fn token_file_uses_uint32_ids_above_vocab_65536() {
    // 65536 merges, one per pair of bytes: vocab 65792
    let mut text = String::from("gcbench-bpe-merges v1 65536\n");
    for l in 0..256 {
        for r in 0..256 {
            text.push_str(&format!("{} {}\n", l, r));
        }
    }
    let m = Merges::parse(text.as_bytes()).unwrap();
    let ids = Encoder::new(&m).encode(b"abc");
    assert_eq!(ids, vec![256 + 97 * 256 + 98, 99]);
    let buf = token_file_bytes(&ids, &m);
    assert_eq!(&buf[..8], b"GCBTOKEN");
    assert_eq!(u32::from_le_bytes([buf[12], buf[13], buf[14], buf[15]]), 4);
    assert_eq!(u32::from_le_bytes([buf[16], buf[17], buf[18], buf[19]]), 65792);
    assert_eq!(buf.len(), 64 + 8);
    assert_eq!(u32::from_le_bytes([buf[64], buf[65], buf[66], buf[67]]), 25186);
}

#[test]
fn corrupt_merges_files_are_rejected_with_their_line() {
    let cases: &[(&str, &[u8], usize, &str)] = &[
        ("empty", b"", 1, "empty"),
        ("no final newline", b"gcbench-bpe-merges v1 1\n97 98", 0, "newline"),
        ("wrong magic", b"bpe-merges v1 0\n", 1, "first line"),
        ("wrong version", b"gcbench-bpe-merges v2 0\n", 1, "version"),
        ("count mismatch", b"gcbench-bpe-merges v1 2\n97 98\n", 0, "announces 2"),
        ("three fields", b"gcbench-bpe-merges v1 1\n97 98 99\n", 2, "two ids"),
        ("leading zero", b"gcbench-bpe-merges v1 1\n097 98\n", 2, "leading zeros"),
        ("negative", b"gcbench-bpe-merges v1 1\n-1 98\n", 2, "decimal"),
        ("crlf", b"gcbench-bpe-merges v1 1\r\n97 98\r\n", 1, "merge count"),
        (
            "forward reference",
            b"gcbench-bpe-merges v1 1\n256 98\n",
            2,
            "not smaller",
        ),
        // 97 258 = "a"+"bc" = "abc", already made by 256 99 = "ab"+"c"
        (
            "duplicate bytes",
            b"gcbench-bpe-merges v1 4\n97 98\n256 99\n98 99\n97 258\n",
            5,
            "earlier id",
        ),
    ];
    for (name, data, line, msg) in cases {
        let err = Merges::parse(data).expect_err(name);
        assert_eq!(err.line, *line, "{}: {}", name, err);
        assert!(err.msg.contains(msg), "{}: {}", name, err);
    }
}

#[test]
fn sixty_four_bit_positions_give_the_same_ids_as_thirty_two_bit_ones() {
    // Chunks of 4 GiB or more merge with u64 positions; too big to test here, so the
    // same code runs on every vector with the wide positions forced.
    let v = load_vectors();
    let m = load_merges(&v);
    for (name, input, ids) in &v.cases {
        let mut enc = Encoder::new(&m);
        enc.force_wide_positions();
        assert_eq!(&enc.encode(input), ids, "case {}", name);
    }
    for (name, _, length, seed, count, sha) in &v.gens {
        let mut enc = Encoder::new(&m);
        enc.force_wide_positions();
        let got = enc.encode(&letters_lcg(*length, *seed));
        assert_eq!((got.len(), &ids_sha256(&got)), (*count, sha), "{}", name);
    }
}

#[test]
fn merges_errors_quote_bytes_as_the_python_reference() {
    let err = Merges::parse(b"gcbench-bpe-merges v1 1\n\xff\"\\ 98\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2: corrupt merges file: left id \"\\xff\\\"\\\\\" is not a decimal number without leading zeros"
    );
    let err = Merges::parse(b"gcbench-bpe-merges v\xc3\xa9 0\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 1: corrupt merges file: unsupported version \"v\\xc3\\xa9\", expected v1"
    );
    let err = Merges::parse(b"gcbench-bpe-merges v1 4\n97 98\n256 99\n98 99\n97 258\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 5: corrupt merges file: merge 3 (97 258) makes bytes \"abc\" that an earlier id already has"
    );
}
