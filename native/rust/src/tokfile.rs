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

/// Write the token file atomically (temp file in the same folder, then rename).
pub fn write_token_file(path: &Path, ids: &[u32], merges: &Merges) -> io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{}.tmp{}", name, std::process::id()));
    let result = fs::write(&tmp, token_file_bytes(ids, merges)).and_then(|_| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
