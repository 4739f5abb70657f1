//! gcbench-tok-rust: tokenize a corpus with a GC-Bench merges file into a token file.
//!
//!     gcbench-tok-rust --merges MERGES --in CORPUS --out TOKENS [--stats] [--repeat N]
//!
//! Exit codes (the same as gcbench-tok-go and gcbench.tokenizer.errors): 0 ok, 1 input
//! too large to merge, 2 bad command line, 3 merges file missing or unreadable, 4 merges
//! file corrupt, 5 corpus unreadable, 6 output not writable.
//!
//! An error is one line on stderr, `gcbench-tok-rust: error: <path>: <message>`, the path
//! as given (any bytes: arguments are read as OS strings, never as UTF-8), the operating
//! system's reason worded as the C library and Python word it ("No such file or
//! directory"). Paths are used as given, never cleaned.
//!
//! --stats prints one JSON line on stdout: bytes, tokens, encode_s (the fastest of
//! --repeat encodes, each with a fresh encoder, so the chunk cache starts empty), MB/s
//! (null when no time was measured).

use gcbench_tok::{longest_chunk, tokfile, Encoder, Merges, MAX_CHUNK};
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::PathBuf;
use std::process::exit;
use std::time::{Duration, Instant};

const PROG: &str = "gcbench-tok-rust";
const USAGE: &str = "usage: gcbench-tok-rust --merges MERGES --in CORPUS --out TOKENS [--stats] [--repeat N]";

struct Args {
    merges: PathBuf,
    input: PathBuf,
    output: PathBuf,
    stats: bool,
    repeat: u32,
}

/// The bytes of an OS string (on Unix exactly the argument's bytes).
#[cfg(unix)]
fn os_bytes(s: &OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes().to_vec()
}

#[cfg(not(unix))]
fn os_bytes(s: &OsStr) -> Vec<u8> {
    s.to_string_lossy().into_owned().into_bytes()
}

#[cfg(unix)]
fn os_string(b: &[u8]) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(b).to_os_string()
}

#[cfg(not(unix))]
fn os_string(b: &[u8]) -> OsString {
    OsString::from(String::from_utf8_lossy(b).into_owned())
}

fn parse_args(argv: &[OsString]) -> Result<Args, String> {
    let (mut merges, mut input, mut output) = (None, None, None);
    let mut stats = false;
    let mut repeat = 1u32;
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        // --flag value and --flag=value, like Go's flag package; values are any bytes
        let raw = os_bytes(arg);
        let (name, inline) = match raw.iter().position(|&b| b == b'=') {
            Some(i) if raw.starts_with(b"-") => (&raw[..i], Some(os_string(&raw[i + 1..]))),
            _ => (&raw[..], None),
        };
        let name = String::from_utf8_lossy(name).into_owned();
        let mut value = |name: &str| -> Result<OsString, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => it.next().cloned().ok_or_else(|| format!("{} needs a value", name)),
            }
        };
        match name.as_str() {
            "--merges" | "-merges" => merges = Some(PathBuf::from(value(&name)?)),
            "--in" | "-in" => input = Some(PathBuf::from(value(&name)?)),
            "--out" | "-out" => output = Some(PathBuf::from(value(&name)?)),
            "--repeat" | "-repeat" => {
                repeat = value(&name)?
                    .to_str()
                    .and_then(|s| s.parse().ok())
                    .filter(|&n| n >= 1)
                    .ok_or("--repeat needs a positive integer")?
            }
            "--stats" | "-stats" => stats = true,
            "-h" | "--help" | "-help" => return Err(String::new()),
            other => return Err(format!("unknown argument {:?}", other)),
        }
    }
    match (merges, input, output) {
        (Some(merges), Some(input), Some(output)) => Ok(Args {
            merges,
            input,
            output,
            stats,
            repeat,
        }),
        _ => Err("--merges, --in and --out are required".into()),
    }
}

/// Print "gcbench-tok-rust: error: <path>: <msg>" (the path's own bytes) and exit.
fn fail(code: i32, path: &std::path::Path, msg: String) -> ! {
    let mut line = format!("{}: error: ", PROG).into_bytes();
    line.extend_from_slice(&os_bytes(path.as_os_str()));
    line.extend_from_slice(b": ");
    line.extend_from_slice(msg.as_bytes());
    line.push(b'\n');
    let _ = std::io::stderr().write_all(&line);
    exit(code)
}

/// The operating system's reason, as strerror words it: "No such file or directory (os
/// error 2)" -> "No such file or directory" (the same text as Python's and Go's).
fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn main() {
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(msg) if msg.is_empty() => {
            println!("{}", USAGE);
            exit(0)
        }
        Err(msg) => {
            eprintln!("{}: {}\n{}", PROG, msg, USAGE);
            exit(2)
        }
    };
    let raw = std::fs::read(&args.merges)
        .unwrap_or_else(|e| fail(3, &args.merges, format!("cannot read merges file: {}", io_reason(&e))));
    let merges = Merges::parse(&raw).unwrap_or_else(|e| fail(4, &args.merges, e.to_string()));
    let corpus = std::fs::read(&args.input)
        .unwrap_or_else(|e| fail(5, &args.input, format!("cannot read corpus: {}", io_reason(&e))));
    if corpus.len() as u64 > MAX_CHUNK {
        let (n, at) = longest_chunk(&corpus);
        if n > MAX_CHUNK {
            fail(
                1,
                &args.input,
                format!(
                    "cannot tokenize: the pre-token at byte {} is {} bytes long, more than the {} this program merges",
                    at, n, MAX_CHUNK
                ),
            );
        }
    }
    let mut ids = Vec::new();
    let mut best = Duration::MAX;
    for _ in 0..args.repeat {
        let mut enc = Encoder::new(&merges);
        let t0 = Instant::now();
        ids = enc.encode(&corpus);
        best = best.min(t0.elapsed());
    }
    if let Err(e) = tokfile::write_token_file(&args.output, &ids, &merges) {
        fail(6, &args.output, format!("cannot write token file: {}", io_reason(&e)));
    }
    if args.stats {
        let secs = best.as_secs_f64();
        let mb_per_s = if secs > 0.0 {
            format!("{:.3}", corpus.len() as f64 / 1e6 / secs)
        } else {
            "null".to_string()
        };
        println!(
            "{{\"impl\": \"rust\", \"bytes\": {}, \"tokens\": {}, \"encode_s\": {:.9}, \"mb_per_s\": {}}}",
            corpus.len(),
            ids.len(),
            secs,
            mb_per_s
        );
    }
}
