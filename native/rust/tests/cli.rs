//! The gcbench-tok-rust command line: outputs and exit codes per fault.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gcbench-tok-rust"))
}

fn merges() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/merges.txt")
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gcbench-tok-rust-{}-{}", name, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = bin().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn command_line_exit_codes_name_each_fault() {
    let dir = tempdir("faults");
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, b"hello world").unwrap();
    let corrupt = dir.join("corrupt.txt");
    std::fs::write(&corrupt, b"gcbench-bpe-merges v1 5\n97 98\n").unwrap();
    let out = dir.join("out.tok");
    let m = merges();
    let missing = dir.join("nope.txt");
    let no_corpus = dir.join("none");
    let bad_out = dir.join("no").join("such").join("dir.tok");
    let cases: Vec<(&str, Vec<&std::ffi::OsStr>, i32, &str)> = vec![
        ("usage", vec!["--merges".as_ref(), m.as_os_str()], 2, "usage"),
        (
            "missing merges",
            vec![
                "--merges".as_ref(),
                missing.as_os_str(),
                "--in".as_ref(),
                corpus.as_os_str(),
                "--out".as_ref(),
                out.as_os_str(),
            ],
            3,
            "cannot read merges file: no such file",
        ),
        (
            "corrupt merges",
            vec![
                "--merges".as_ref(),
                corrupt.as_os_str(),
                "--in".as_ref(),
                corpus.as_os_str(),
                "--out".as_ref(),
                out.as_os_str(),
            ],
            4,
            "corrupt merges file: header announces 5",
        ),
        (
            "unreadable corpus",
            vec![
                "--merges".as_ref(),
                m.as_os_str(),
                "--in".as_ref(),
                no_corpus.as_os_str(),
                "--out".as_ref(),
                out.as_os_str(),
            ],
            5,
            "cannot read corpus",
        ),
        (
            "unwritable output",
            vec![
                "--merges".as_ref(),
                m.as_os_str(),
                "--in".as_ref(),
                corpus.as_os_str(),
                "--out".as_ref(),
                bad_out.as_os_str(),
            ],
            6,
            "cannot write token file",
        ),
    ];
    for (name, args, code, msg) in cases {
        let (got, _, stderr) = run(&args);
        assert_eq!(got, code, "{}: {}", name, stderr);
        assert!(stderr.contains(msg), "{}: {}", name, stderr);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn command_line_writes_the_token_file_and_stats() {
    let dir = tempdir("ok");
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, b"hello world").unwrap();
    let out = dir.join("out.tok");
    let m = merges();
    let (code, stdout, stderr) = run(&[
        "--merges".as_ref(),
        m.as_os_str(),
        "--in".as_ref(),
        corpus.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--stats".as_ref(),
        "--repeat=2".as_ref(),
    ]);
    assert_eq!(code, 0, "{}", stderr);
    assert!(stdout.contains("\"bytes\": 11"), "{}", stdout);
    let data = std::fs::read(&out).unwrap();
    assert_eq!(&data[..8], b"GCBTOKEN");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}
