//! gcbench-tok-rust: tokenize a corpus with a GC-Bench merges file into a token file.
//!
//!     gcbench-tok-rust --merges MERGES --in CORPUS --out TOKENS [--stats] [--repeat N]
//!
//! Exit codes (the same as gcbench-tok-go and gcbench.tokenizer.errors): 0 ok, 2 bad
//! command line, 3 merges file missing or unreadable, 4 merges file corrupt, 5 corpus
//! unreadable, 6 output not writable.
//!
//! --stats prints one JSON line on stdout: bytes, tokens, encode_s (the fastest of
//! --repeat encodes, each with a fresh encoder, so the chunk cache starts empty), MB/s.

use gcbench_tok::{tokfile, Encoder, Merges};
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

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let (mut merges, mut input, mut output) = (None, None, None);
    let mut stats = false;
    let mut repeat = 1u32;
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        // --flag value and --flag=value, like Go's flag package
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => it.next().cloned().ok_or_else(|| format!("{} needs a value", name)),
            }
        };
        match name {
            "--merges" | "-merges" => merges = Some(PathBuf::from(value(name)?)),
            "--in" | "-in" => input = Some(PathBuf::from(value(name)?)),
            "--out" | "-out" => output = Some(PathBuf::from(value(name)?)),
            "--repeat" | "-repeat" => {
                repeat = value(name)?
                    .parse()
                    .ok()
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

fn fail(code: i32, msg: String) -> ! {
    eprintln!("{}: error: {}", PROG, msg);
    exit(code)
}

fn io_reason(e: &std::io::Error) -> String {
    // "No such file or directory (os error 2)" -> keep only the reason, like Go's and Python's
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_lowercase(),
        None => s,
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
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
    let raw = std::fs::read(&args.merges).unwrap_or_else(|e| {
        fail(
            3,
            format!("{}: cannot read merges file: {}", args.merges.display(), io_reason(&e)),
        )
    });
    let merges = Merges::parse(&raw).unwrap_or_else(|e| fail(4, format!("{}: {}", args.merges.display(), e)));
    let corpus = std::fs::read(&args.input).unwrap_or_else(|e| {
        fail(
            5,
            format!("{}: cannot read corpus: {}", args.input.display(), io_reason(&e)),
        )
    });
    let mut ids = Vec::new();
    let mut best = Duration::MAX;
    for _ in 0..args.repeat {
        let mut enc = Encoder::new(&merges);
        let t0 = Instant::now();
        ids = enc.encode(&corpus);
        best = best.min(t0.elapsed());
    }
    if let Err(e) = tokfile::write_token_file(&args.output, &ids, &merges) {
        fail(
            6,
            format!("{}: cannot write token file: {}", args.output.display(), io_reason(&e)),
        );
    }
    if args.stats {
        let secs = best.as_secs_f64();
        println!(
            "{{\"impl\": \"rust\", \"bytes\": {}, \"tokens\": {}, \"encode_s\": {:.6}, \"mb_per_s\": {:.3}}}",
            corpus.len(),
            ids.len(),
            secs,
            corpus.len() as f64 / 1e6 / secs
        );
    }
}
