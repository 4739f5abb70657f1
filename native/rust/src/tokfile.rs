//! Token file writer, byte-identical to plugins/gcbench/tokenizer/tokenfile.py: a
//! 64-byte little-endian header (magic "GCBTOKEN", version 1, itemsize 2|4, vocab_size,
//! reserved 0, count u64, SHA-256 of the merges file), then the ids as u16
//! (vocab_size <= 65536) or u32, little-endian.

use crate::Merges;
use std::fs;
use std::io;
use std::path::Path;

pub const TOKEN_MAGIC: &[u8; 8] = b"GCBTOKEN";
pub const TOKEN_VERSION: u32 = 1;
pub const HEADER_SIZE: usize = 64;

/// Bytes per id: 2 up to 65536 ids, else 4.
pub fn item_size(vocab_size: usize) -> usize {
    if vocab_size <= 65536 {
        2
    } else {
        4
    }
}

/// The complete token file content for `ids` made with `merges`.
pub fn token_file_bytes(ids: &[u32], merges: &Merges) -> Vec<u8> {
    let item = item_size(merges.vocab_size());
    let mut buf = Vec::with_capacity(HEADER_SIZE + ids.len() * item);
    buf.extend_from_slice(TOKEN_MAGIC);
    buf.extend_from_slice(&TOKEN_VERSION.to_le_bytes());
    buf.extend_from_slice(&(item as u32).to_le_bytes());
    buf.extend_from_slice(&(merges.vocab_size() as u32).to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    buf.extend_from_slice(&(ids.len() as u64).to_le_bytes());
    buf.extend_from_slice(&merges.sha256);
    if item == 2 {
        for &id in ids {
            buf.extend_from_slice(&(id as u16).to_le_bytes());
        }
    } else {
        for &id in ids {
            buf.extend_from_slice(&id.to_le_bytes());
        }
    }
    buf
}

/// EISDIR, "Is a directory", and ENOENT, "No such file or directory" (21 and 2 on Linux,
/// the BSDs and macOS).
const EISDIR: i32 = 21;
const ENOENT: i32 = 2;

/// Write the token file atomically, as the Python reference's atomic_write: the path is
/// split at its last '/' (never cleaned), the temp file is `<folder>/.<name>.tmp<pid>`,
/// then rename(2) replaces `<folder>/<name>`. A name that is empty, `.` or `..` names a
/// folder: EISDIR; the empty path does not exist: ENOENT.
pub fn write_token_file(path: &Path, ids: &[u32], merges: &Merges) -> io::Result<()> {
    let raw = path_bytes(path);
    if raw.is_empty() {
        return Err(io::Error::from_raw_os_error(ENOENT));
    }
    let cut = raw.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let (folder, name) = raw.split_at(cut);
    if name.is_empty() || name == b"." || name == b".." {
        return Err(io::Error::from_raw_os_error(EISDIR));
    }
    let mut tmp = folder.to_vec();
    tmp.push(b'.');
    tmp.extend_from_slice(name);
    tmp.extend_from_slice(format!(".tmp{}", std::process::id()).as_bytes());
    let tmp = bytes_path(&tmp);
    let result = fs::write(&tmp, token_file_bytes(ids, merges)).and_then(|_| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(unix)]
fn path_bytes(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().to_vec()
}

#[cfg(not(unix))]
fn path_bytes(path: &Path) -> Vec<u8> {
    path.to_string_lossy().into_owned().into_bytes()
}

#[cfg(unix)]
fn bytes_path(b: &[u8]) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    std::path::PathBuf::from(std::ffi::OsStr::from_bytes(b))
}

#[cfg(not(unix))]
fn bytes_path(b: &[u8]) -> std::path::PathBuf {
    std::path::PathBuf::from(String::from_utf8_lossy(b).into_owned())
}
