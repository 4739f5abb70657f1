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
            "cannot read merges file: No such file or directory",
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

#[cfg(unix)]
fn raw(b: &[u8]) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(b).to_os_string()
}

fn run_bytes(args: &[&std::ffi::OsStr]) -> (i32, Vec<u8>) {
    let out = bin().args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), out.stderr)
}

#[cfg(unix)]
#[test]
fn file_names_that_are_not_utf8_are_read_written_and_reported_byte_for_byte() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempdir("bytes");
    let corpus = dir.join(raw(b"corpus-\xff\xfe.txt"));
    std::fs::write(&corpus, b"hello world").unwrap();
    let out = dir.join(raw(b"out-\x80.tok"));
    let m = merges();
    let (code, stderr) = run_bytes(&[
        "--merges".as_ref(),
        m.as_os_str(),
        "--in".as_ref(),
        corpus.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&stderr));
    assert_eq!(&std::fs::read(&out).unwrap()[..8], b"GCBTOKEN");
    let missing = dir.join(raw(b"missing-\xff.txt"));
    let (code, stderr) = run_bytes(&[
        "--merges".as_ref(),
        m.as_os_str(),
        "--in".as_ref(),
        missing.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(code, 5);
    let mut want = b"gcbench-tok-rust: error: ".to_vec();
    want.extend_from_slice(missing.as_os_str().as_bytes());
    want.extend_from_slice(b": cannot read corpus: No such file or directory\n");
    assert_eq!(stderr, want);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_output_path_naming_a_folder_is_refused_as_a_directory() {
    let dir = tempdir("folder-out");
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, b"").unwrap();
    let m = merges();
    let trailing = format!("{}/sub/", dir.display());
    std::fs::create_dir(dir.join("sub")).unwrap();
    for out in [
        dir.join("sub").into_os_string(),
        trailing.into(),
        dir.join(".").into_os_string(),
    ] {
        let (code, _, stderr) = run(&[
            "--merges".as_ref(),
            m.as_os_str(),
            "--in".as_ref(),
            corpus.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
        ]);
        assert_eq!(code, 6, "{:?}: {}", out, stderr);
        assert!(
            stderr.ends_with(": cannot write token file: Is a directory\n"),
            "{}",
            stderr
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_empty_corpus_gives_a_token_file_of_no_ids_and_valid_stats() {
    let dir = tempdir("empty");
    let corpus = dir.join("empty.txt");
    std::fs::write(&corpus, b"").unwrap();
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
    ]);
    assert_eq!(code, 0, "{}", stderr);
    assert!(stdout.contains("\"bytes\": 0, \"tokens\": 0"), "{}", stdout);
    assert!(!stdout.contains("inf") && !stdout.contains("NaN"), "{}", stdout);
    assert_eq!(std::fs::read(&out).unwrap().len(), 64);
    std::fs::remove_dir_all(&dir).unwrap();
}
