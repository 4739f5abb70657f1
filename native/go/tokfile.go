package main

// Token file writer, byte-identical to plugins/gcbench/tokenizer/tokenfile.py:
// a 64-byte little-endian header (magic "GCBTOKEN", version 1, itemsize 2|4,
// vocab_size, reserved 0, count uint64, SHA-256 of the merges file) then the ids as
// uint16 (vocab_size <= 65536) or uint32, little-endian.

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"syscall"
)

const (
	tokenMagic   = "GCBTOKEN"
	tokenVersion = 1
	headerSize   = 64
)

// ItemSize is the bytes per id for a vocabulary size: 2 up to 65536 ids, else 4.
func ItemSize(vocabSize int) int {
	if vocabSize <= 65536 {
		return 2
	}
	return 4
}

// TokenFileBytes is the complete token file content for ids made with m.
func TokenFileBytes(ids []uint32, m *Merges) []byte {
	item := ItemSize(m.VocabSize())
	buf := make([]byte, headerSize+len(ids)*item)
	copy(buf[0:8], tokenMagic)
	binary.LittleEndian.PutUint32(buf[8:], tokenVersion)
	binary.LittleEndian.PutUint32(buf[12:], uint32(item))
	binary.LittleEndian.PutUint32(buf[16:], uint32(m.VocabSize()))
	binary.LittleEndian.PutUint32(buf[20:], 0)
	binary.LittleEndian.PutUint64(buf[24:], uint64(len(ids)))
	copy(buf[32:64], m.Sha256[:])
	body := buf[headerSize:]
	if item == 2 {
		for i, id := range ids {
			binary.LittleEndian.PutUint16(body[2*i:], uint16(id))
		}
	} else {
		for i, id := range ids {
			binary.LittleEndian.PutUint32(body[4*i:], id)
		}
	}
	return buf
}

// WriteTokenFile writes the token file atomically, as the Python reference's atomic_write:
// the path is split at its last '/' (never cleaned), the temp file is
// "<folder>/.<name>.tmp<pid>", then rename(2) replaces "<folder>/<name>". A name that is
// empty, "." or ".." names a folder: EISDIR; the empty path does not exist: ENOENT.
func WriteTokenFile(path string, ids []uint32, m *Merges) error {
	if path == "" {
		return &os.PathError{Op: "write", Path: path, Err: syscall.ENOENT}
	}
	cut := strings.LastIndexByte(path, '/')
	folder, name := path[:cut+1], path[cut+1:]
	if name == "" || name == "." || name == ".." {
		return &os.PathError{Op: "write", Path: path, Err: syscall.EISDIR}
	}
	tmp := folder + "." + name + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, TokenFileBytes(ids, m), 0o666); err != nil {
		os.Remove(tmp)
		return err
	}
	// syscall.Rename, not os.Rename: os.Rename reports EEXIST for an existing folder,
	// where rename(2) (and Python) say EISDIR.
	if err := syscall.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
