/* tok-c: GC-Bench's byte-level BPE (algorithm version 1) in C99, an example of a
 * declared preprocessor.
 *
 *     tok-c --merges MERGES --in CORPUS --out IDS
 *
 * Writes the token ids of CORPUS, decimal, one per line, each followed by "\n" (an empty
 * corpus gives an empty file): the "ids" output contract, which GC-Bench converts into
 * its token file outside the measured window.
 *
 * The definition is the Python reference, plugins/gcbench/tokenizer/bpe.py (module
 * docstring: pre-tokenizer, merge order, the "gcbench-bpe-merges v1" file); this is a
 * port of native/go/bpe.go and gives the same ids for every byte string.
 *
 * Exit codes (those of gcbench.tokenizer.errors): 0 ok, 1 a pre-token too long to merge
 * or out of memory, 2 bad command line, 3 merges file missing or unreadable, 4 merges
 * file corrupt, 5 corpus unreadable, 6 output not writable. An error is one line on
 * stderr, "tok-c: error: <path>: <message>", the path as given, the operating system's
 * reason as strerror words it (the same text as Python's OSError.strerror).
 *
 * Build: cc -O2 -std=c99 -o tok-c tok.c
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define PROG "tok-c"
#define USAGE "usage: tok-c --merges MERGES --in CORPUS --out IDS"
#define MERGES_MAGIC "gcbench-bpe-merges"
#define MERGES_VERSION "v1"
#define MAX_ID (UINT64_C(1) << 31)
/* Chunks longer than this are not cached (bytes); the cache is emptied at CACHE_MAX_ENTRIES. */
#define CACHE_MAX_CHUNK 256
#define CACHE_MAX_ENTRIES (1u << 18)
/* Positions are int32: the longest chunk this program merges. */
#define MAX_CHUNK ((size_t)INT32_MAX - 1)

enum { EXIT_TOO_LARGE = 1, EXIT_USAGE = 2, EXIT_MERGES_READ = 3, EXIT_MERGES_CORRUPT = 4, EXIT_CORPUS = 5, EXIT_OUTPUT = 6 };

/* ------------------------------------------------------------------ errors */

static const char *g_oom_path = "";

/* Print "tok-c: error: <path>: <message>" and exit with code. */
static void fail(int code, const char *path, const char *fmt, ...) {
    va_list ap;
    fputs(PROG ": error: ", stderr);
    fputs(path, stderr);
    fputs(": ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (q == NULL) fail(EXIT_TOO_LARGE, g_oom_path, "out of memory (%zu bytes)", n);
    return q;
}

/* ------------------------------------------------------------------ files */

/* Read a whole file into *out (malloc'd, *len bytes); 0, or the errno on failure. */
static int read_file(const char *path, unsigned char **out, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno;
    struct stat st;
    size_t cap = 1 << 16;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) cap = (size_t)st.st_size + 1;
    unsigned char *buf = malloc(cap);
    if (buf == NULL) {
        close(fd);
        return ENOMEM;
    }
    size_t n = 0;
    for (;;) {
        if (n == cap) {
            cap *= 2;
            unsigned char *nb = realloc(buf, cap);
            if (nb == NULL) {
                free(buf);
                close(fd);
                return ENOMEM;
            }
            buf = nb;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            close(fd);
            return e;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    *out = buf;
    *len = n;
    return 0;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write ids as decimal lines to path atomically, as the Python reference writes its
 * files (gcbench.tokenizer.bpe.atomic_write): "<folder>/.<name>.tmp<pid>", then
 * rename(2). A name that is empty, "." or ".." names a folder: EISDIR; the empty path
 * does not exist: ENOENT. Returns 0 or the errno. */
static int write_ids(const char *path, const uint32_t *ids, size_t count) {
    if (path[0] == '\0') return ENOENT;
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    if (name[0] == '\0' || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return EISDIR;
    size_t folder_len = (size_t)(name - path);
    size_t tmp_cap = strlen(path) + 32;
    char *tmp = xrealloc(NULL, tmp_cap);
    memcpy(tmp, path, folder_len);
    snprintf(tmp + folder_len, tmp_cap - folder_len, ".%s.tmp%ld", name, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return e;
    }
    enum { BUF = 1 << 16 };
    char *buf = xrealloc(NULL, BUF);
    size_t used = 0;
    int err = 0;
    for (size_t i = 0; i < count && !err; i++) {
        char digits[12];
        int nd = 0;
        uint32_t v = ids[i];
        do {
            digits[nd++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        if (used + (size_t)nd + 1 > BUF) {
            err = write_all(fd, buf, used);
            used = 0;
        }
        while (nd > 0) buf[used++] = digits[--nd];
        buf[used++] = '\n';
    }
    if (!err) err = write_all(fd, buf, used);
    free(buf);
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) unlink(tmp);
    free(tmp);
    return err;
}

/* ------------------------------------------------------------------ hashing */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = UINT64_C(0x517cc1b727220a95) ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * UINT64_C(0x9E3779B97F4A7C15);
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * UINT64_C(0x9E3779B97F4A7C15);
    return mix64(h);
}

/* pair key (left << 32 | right) -> rank: open addressing, linear probing. */
typedef struct {
    uint64_t *keys;
    uint32_t *vals;
    uint64_t mask;
} RankTable;

#define EMPTY_KEY UINT64_MAX

static void ranks_init(RankTable *t, size_t n) {
    size_t size = 16;
    while (size < 2 * n + 16) size <<= 1;
    t->keys = xrealloc(NULL, size * sizeof *t->keys);
    t->vals = xrealloc(NULL, size * sizeof *t->vals);
    t->mask = size - 1;
    for (size_t i = 0; i < size; i++) t->keys[i] = EMPTY_KEY;
}

static void ranks_put(RankTable *t, uint64_t key, uint32_t val) {
    uint64_t i = mix64(key) & t->mask;
    while (t->keys[i] != EMPTY_KEY && t->keys[i] != key) i = (i + 1) & t->mask;
    t->keys[i] = key;
    t->vals[i] = val;
}

/* The rank of a pair, or -1 when it is no merge. */
static inline int64_t ranks_get(const RankTable *t, uint64_t key) {
    uint64_t i = mix64(key) & t->mask;
    for (;;) {
        uint64_t k = t->keys[i];
        if (k == key) return t->vals[i];
        if (k == EMPTY_KEY) return -1;
        i = (i + 1) & t->mask;
    }
}

static inline uint64_t pair_key(uint32_t left, uint32_t right) { return ((uint64_t)left << 32) | right; }

/* ------------------------------------------------------------------ merges file */

typedef struct {
    uint32_t (*pairs)[2]; /* pairs[k] makes id 256 + k */
    size_t count;
} Merges;

static char g_msg[256];
static size_t g_line; /* 1-based line of the fault, 0 when about the whole file */

/* quote_bytes of the reference: in double quotes, printable ASCII as is (" and \
 * escaped), any other byte as \xNN; at most 20 bytes of b. */
static void quote_bytes(char *out, const unsigned char *b, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (n > 20) n = 20;
    *out++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = b[i];
        if (c == '"' || c == '\\') {
            *out++ = '\\';
            *out++ = (char)c;
        } else if (c >= 0x20 && c < 0x7f) {
            *out++ = (char)c;
        } else {
            *out++ = '\\';
            *out++ = 'x';
            *out++ = hex[c >> 4];
            *out++ = hex[c & 15];
        }
    }
    *out++ = '"';
    *out = '\0';
}

/* A decimal id without sign or leading zeros, below 2**31; 0 and g_msg set when not. */
static int parse_id(const unsigned char *p, size_t n, size_t line, const char *what, uint32_t *out) {
    int bad = n == 0 || n > 10 || (n > 1 && p[0] == '0');
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9') bad = 1;
    if (bad) {
        char q[100];
        quote_bytes(q, p, n);
        snprintf(g_msg, sizeof g_msg, "%s %s is not a decimal number without leading zeros", what, q);
        g_line = line;
        return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = v * 10 + (uint64_t)(p[i] - '0');
    if (v >= MAX_ID) {
        snprintf(g_msg, sizeof g_msg, "%s %llu is too large", what, (unsigned long long)v);
        g_line = line;
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

static int corrupt(size_t line, const char *msg) {
    g_line = line;
    snprintf(g_msg, sizeof g_msg, "%s", msg);
    return 0;
}

/* Parse and validate merges file content as strictly as the Python reference (the same
 * checks in the same order: syntax of every line, then the ids of every merge); 0 with
 * g_msg and g_line set when it is corrupt. */
static int parse_merges(const unsigned char *data, size_t len, Merges *m) {
    if (len == 0) return corrupt(1, "file is empty");
    if (data[len - 1] != '\n') return corrupt(0, "file does not end with a newline (truncated?)");
    const unsigned char *end = data + len - 1; /* the content split on "\n" */
    const unsigned char *eol = memchr(data, '\n', (size_t)(end - data));
    if (eol == NULL) eol = end;
    /* header: exactly three fields separated by single spaces */
    const unsigned char *f[3];
    size_t fl[3];
    size_t nf = 0;
    const unsigned char *s = data;
    for (const unsigned char *p = data;; p++) {
        if (p == eol || *p == ' ') {
            if (nf < 3) {
                f[nf] = s;
                fl[nf] = (size_t)(p - s);
            }
            nf++;
            s = p + 1;
            if (p == eol) break;
        }
    }
    if (nf != 3 || fl[0] != strlen(MERGES_MAGIC) || memcmp(f[0], MERGES_MAGIC, fl[0]) != 0)
        return corrupt(1, "first line must be '" MERGES_MAGIC " " MERGES_VERSION " <count>'");
    if (fl[1] != strlen(MERGES_VERSION) || memcmp(f[1], MERGES_VERSION, fl[1]) != 0) {
        char q[100];
        quote_bytes(q, f[1], fl[1]);
        snprintf(g_msg, sizeof g_msg, "unsupported version %s, expected " MERGES_VERSION, q);
        g_line = 1;
        return 0;
    }
    uint32_t count;
    if (!parse_id(f[2], fl[2], 1, "merge count", &count)) return 0;
    size_t lines = 0;
    for (const unsigned char *p = data; p < end; p++) lines += *p == '\n';
    if (lines != count) {
        snprintf(g_msg, sizeof g_msg, "header announces %lu merges but the file has %zu", (unsigned long)count, lines);
        g_line = 0;
        return 0;
    }
    m->count = count;
    m->pairs = xrealloc(NULL, (count ? count : 1) * sizeof *m->pairs);
    const unsigned char *line = eol + 1;
    for (size_t k = 0; k < count; k++) {
        const unsigned char *le = memchr(line, '\n', (size_t)(end - line));
        if (le == NULL) le = end;
        const unsigned char *sp = memchr(line, ' ', (size_t)(le - line));
        if (sp == NULL || memchr(sp + 1, ' ', (size_t)(le - sp - 1)) != NULL)
            return corrupt(k + 2, "expected two ids separated by one space");
        if (!parse_id(line, (size_t)(sp - line), k + 2, "left id", &m->pairs[k][0])) return 0;
        if (!parse_id(sp + 1, (size_t)(le - sp - 1), k + 2, "right id", &m->pairs[k][1])) return 0;
        line = le + 1;
    }
    return 1;
}

/* The reference's _validate_pairs: ids smaller than the id being made, and the bytes of
 * every made id differ from those of all ids before it. */
static int validate_merges(const Merges *m) {
    size_t vocab = 256 + m->count;
    size_t *off = xrealloc(NULL, (vocab + 1) * sizeof *off); /* token bytes: arena[off[i]..off[i+1]) */
    size_t arena_cap = 1 << 16, arena_len = 256;
    unsigned char *arena = xrealloc(NULL, arena_cap);
    for (size_t b = 0; b < 256; b++) {
        arena[b] = (unsigned char)b;
        off[b] = b;
    }
    off[256] = 256;
    /* set of token bytes: slot -> id + 1 (0 empty) */
    size_t size = 16;
    while (size < 2 * vocab + 16) size <<= 1;
    uint32_t *set = calloc(size, sizeof *set);
    if (set == NULL) fail(EXIT_TOO_LARGE, g_oom_path, "out of memory");
    size_t mask = size - 1;
    int ok = 1;
    for (size_t id = 0; id < vocab && ok; id++) {
        if (id >= 256) {
            size_t k = id - 256;
            uint32_t left = m->pairs[k][0], right = m->pairs[k][1];
            if (left >= id || right >= id) {
                snprintf(g_msg, sizeof g_msg, "merge %zu (%lu %lu) uses an id not smaller than the id it makes (%zu)", k,
                         (unsigned long)left, (unsigned long)right, id);
                g_line = k + 2;
                ok = 0;
                break;
            }
            size_t ll = off[left + 1] - off[left], rl = off[right + 1] - off[right];
            if (arena_len + ll + rl > arena_cap) {
                while (arena_len + ll + rl > arena_cap) arena_cap *= 2;
                arena = xrealloc(arena, arena_cap);
            }
            memcpy(arena + arena_len, arena + off[left], ll);
            memcpy(arena + arena_len + ll, arena + off[right], rl);
            arena_len += ll + rl;
            off[id + 1] = arena_len;
        }
        const unsigned char *tok = arena + off[id];
        size_t tl = off[id + 1] - off[id];
        size_t i = hash_bytes(tok, tl) & mask;
        for (; set[i]; i = (i + 1) & mask) {
            size_t o = set[i] - 1;
            if (off[o + 1] - off[o] == tl && memcmp(arena + off[o], tok, tl) == 0) {
                char q[100];
                size_t k = id - 256;
                quote_bytes(q, tok, tl);
                snprintf(g_msg, sizeof g_msg, "merge %zu (%lu %lu) makes bytes %s that an earlier id already has", k,
                         (unsigned long)m->pairs[k][0], (unsigned long)m->pairs[k][1], q);
                g_line = k + 2;
                ok = 0;
                break;
            }
        }
        if (ok) set[i] = (uint32_t)(id + 1);
    }
    free(set);
    free(arena);
    free(off);
    return ok;
}

/* ------------------------------------------------------------------ pre-tokenizer */

enum { CLS_L, CLS_D, CLS_S, CLS_P };
static unsigned char byte_class[256];

static void init_classes(void) {
    for (int b = 0; b < 256; b++) {
        if (b >= 0x80 || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'))
            byte_class[b] = CLS_L;
        else if (b >= '0' && b <= '9')
            byte_class[b] = CLS_D;
        else if (b == ' ' || b == '\t' || b == '\n' || b == 0x0b || b == 0x0c || b == '\r')
            byte_class[b] = CLS_S;
        else
            byte_class[b] = CLS_P;
    }
}

/* The end of the pre-token chunk starting at i (i < n): the reference's PRETOKEN_PATTERN. */
static size_t next_chunk(const unsigned char *b, size_t n, size_t i) {
    unsigned char c = byte_class[b[i]];
    if (c == CLS_S) {
        if (b[i] == ' ' && i + 1 < n && byte_class[b[i + 1]] != CLS_S) {
            size_t j = i + 1;
            unsigned char c2 = byte_class[b[j]];
            while (j < n && byte_class[b[j]] == c2) j++;
            return j;
        }
        size_t j = i;
        while (j < n && byte_class[b[j]] == CLS_S) j++;
        if (j < n && j - i >= 2 && b[j - 1] == ' ') j--;
        return j;
    }
    size_t j = i + 1;
    while (j < n && byte_class[b[j]] == c) j++;
    return j;
}

/* ------------------------------------------------------------------ encoder */

typedef struct {
    uint32_t *v;
    size_t len, cap;
} IdVec;

static void idvec_reserve(IdVec *o, size_t extra) {
    if (o->len + extra > o->cap) {
        size_t cap = o->cap ? o->cap : 1024;
        while (cap < o->len + extra) cap *= 2;
        o->v = xrealloc(o->v, cap * sizeof *o->v);
        o->cap = cap;
    }
}

/* chunk bytes -> ids, for chunks of 2..CACHE_MAX_CHUNK bytes; emptied when full. */
typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len; /* in keys */
    uint32_t ids_off, ids_len; /* in ids */
} CacheSlot;

typedef struct {
    CacheSlot *slots; /* key_len == 0: empty */
    size_t mask, entries;
    unsigned char *keys;
    size_t keys_len, keys_cap;
    uint32_t *ids;
    size_t ids_len, ids_cap;
} Cache;

/* Slots start few (a prose corpus has a few thousand distinct chunks: the table stays in
 * the CPU cache) and double at half full, up to 2 * CACHE_MAX_ENTRIES. */
#define CACHE_MIN_SLOTS 4096

static CacheSlot *cache_slots(size_t size) {
    CacheSlot *slots = calloc(size, sizeof *slots);
    if (slots == NULL) fail(EXIT_TOO_LARGE, g_oom_path, "out of memory");
    return slots;
}

static void cache_init(Cache *c) {
    c->slots = cache_slots(CACHE_MIN_SLOTS);
    c->mask = CACHE_MIN_SLOTS - 1;
    c->entries = 0;
    c->keys_cap = 1 << 20;
    c->keys = xrealloc(NULL, c->keys_cap);
    c->keys_len = 0;
    c->ids_cap = 1 << 18;
    c->ids = xrealloc(NULL, c->ids_cap * sizeof *c->ids);
    c->ids_len = 0;
}

/* The slot of chunk: its entry, or the empty slot where it belongs. */
static CacheSlot *cache_find(Cache *c, const unsigned char *p, size_t n, uint64_t h) {
    size_t i = h & c->mask;
    for (;;) {
        CacheSlot *s = &c->slots[i];
        if (s->key_len == 0) return s;
        if (s->hash == h && s->key_len == n && memcmp(c->keys + s->key_off, p, n) == 0) return s;
        i = (i + 1) & c->mask;
    }
}

static void cache_grow(Cache *c) {
    size_t size = (c->mask + 1) * 2;
    CacheSlot *old = c->slots, *slots = cache_slots(size);
    for (size_t i = 0; i <= c->mask; i++) {
        if (old[i].key_len == 0) continue;
        size_t j = old[i].hash & (size - 1);
        while (slots[j].key_len != 0) j = (j + 1) & (size - 1);
        slots[j] = old[i];
    }
    free(old);
    c->slots = slots;
    c->mask = size - 1;
}

static void cache_put(Cache *c, CacheSlot *s, const unsigned char *p, size_t n, uint64_t h, const uint32_t *ids,
                      size_t count) {
    if (c->keys_len + n > c->keys_cap) {
        while (c->keys_len + n > c->keys_cap) c->keys_cap *= 2;
        c->keys = xrealloc(c->keys, c->keys_cap);
    }
    if (c->ids_len + count > c->ids_cap) {
        while (c->ids_len + count > c->ids_cap) c->ids_cap *= 2;
        c->ids = xrealloc(c->ids, c->ids_cap * sizeof *c->ids);
    }
    memcpy(c->keys + c->keys_len, p, n);
    memcpy(c->ids + c->ids_len, ids, count * sizeof *ids);
    s->hash = h;
    s->key_off = (uint32_t)c->keys_len;
    s->key_len = (uint32_t)n;
    s->ids_off = (uint32_t)c->ids_len;
    s->ids_len = (uint32_t)count;
    c->keys_len += n;
    c->ids_len += count;
    c->entries++;
    if (c->entries * 2 > c->mask + 1) cache_grow(c);
}

static void cache_clear(Cache *c) {
    free(c->slots);
    c->slots = cache_slots(CACHE_MIN_SLOTS);
    c->mask = CACHE_MIN_SLOTS - 1;
    c->entries = 0;
    c->keys_len = 0;
    c->ids_len = 0;
}

typedef struct {
    RankTable ranks;
    Cache cache;
    /* workspace of merge_chunk, reused between chunks */
    int32_t *ids, *nxt, *prv;
    size_t work_cap;
    uint64_t *heap;
    size_t heap_len, heap_cap;
} Encoder;

static void encoder_init(Encoder *e, const Merges *m) {
    memset(e, 0, sizeof *e);
    ranks_init(&e->ranks, m->count);
    for (size_t k = 0; k < m->count; k++) ranks_put(&e->ranks, pair_key(m->pairs[k][0], m->pairs[k][1]), (uint32_t)k);
    cache_init(&e->cache);
}

/* A binary min-heap of uint64: rank << 32 | position. */
static void sift_down(uint64_t *h, size_t n, size_t i) {
    uint64_t v = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

static void heap_push(Encoder *e, uint64_t v) {
    if (e->heap_len == e->heap_cap) {
        e->heap_cap = e->heap_cap ? e->heap_cap * 2 : 1024;
        e->heap = xrealloc(e->heap, e->heap_cap * sizeof *e->heap);
    }
    uint64_t *h = e->heap;
    size_t i = e->heap_len++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

/* Append the ids of one chunk (2 <= n <= MAX_CHUNK) to out: lowest rank first, then
 * leftmost, with a linked list of symbols (nxt, prv: positions, -1 at the ends) and a
 * min-heap. A heap entry is stale unless the pair now at its position has its rank (a
 * rank names exactly one pair). */
static void merge_chunk(Encoder *e, IdVec *out, const unsigned char *chunk, size_t n) {
    if (n > e->work_cap) {
        e->ids = xrealloc(e->ids, n * sizeof *e->ids);
        e->nxt = xrealloc(e->nxt, n * sizeof *e->nxt);
        e->prv = xrealloc(e->prv, n * sizeof *e->prv);
        e->work_cap = n;
    }
    int32_t *ids = e->ids, *nxt = e->nxt, *prv = e->prv;
    const RankTable *ranks = &e->ranks;
    for (size_t i = 0; i < n; i++) {
        ids[i] = chunk[i];
        nxt[i] = (int32_t)(i + 1);
        prv[i] = (int32_t)i - 1;
    }
    nxt[n - 1] = -1;
    e->heap_len = 0;
    if (e->heap_cap < n) {
        e->heap_cap = n;
        e->heap = xrealloc(e->heap, e->heap_cap * sizeof *e->heap);
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int64_t r = ranks_get(ranks, pair_key((uint32_t)ids[i], (uint32_t)ids[i + 1]));
        if (r >= 0) e->heap[e->heap_len++] = ((uint64_t)r << 32) | i;
    }
    if (e->heap_len > 1)
        for (size_t i = e->heap_len / 2; i-- > 0;) sift_down(e->heap, e->heap_len, i);
    while (e->heap_len > 0) {
        uint64_t top = e->heap[0];
        e->heap[0] = e->heap[--e->heap_len];
        if (e->heap_len > 1) sift_down(e->heap, e->heap_len, 0);
        uint32_t rank = (uint32_t)(top >> 32);
        int32_t i = (int32_t)(top & 0xffffffffu);
        int32_t j = nxt[i];
        if (j < 0 || ids[i] < 0) continue;
        if (ranks_get(ranks, pair_key((uint32_t)ids[i], (uint32_t)ids[j])) != (int64_t)rank) continue;
        int32_t new_id = (int32_t)(256 + rank);
        ids[i] = new_id;
        ids[j] = -1;
        int32_t k = nxt[j];
        nxt[i] = k;
        if (k >= 0) {
            prv[k] = i;
            int64_t r = ranks_get(ranks, pair_key((uint32_t)new_id, (uint32_t)ids[k]));
            if (r >= 0) heap_push(e, ((uint64_t)r << 32) | (uint32_t)i);
        }
        int32_t p = prv[i];
        if (p >= 0) {
            int64_t r = ranks_get(ranks, pair_key((uint32_t)ids[p], (uint32_t)new_id));
            if (r >= 0) heap_push(e, ((uint64_t)r << 32) | (uint32_t)p);
        }
    }
    size_t count = 0;
    for (int32_t i = 0; i >= 0; i = nxt[i]) count++;
    idvec_reserve(out, count);
    for (int32_t i = 0; i >= 0; i = nxt[i]) out->v[out->len++] = (uint32_t)ids[i];
}

/* Append the ids of data to out (every chunk at most MAX_CHUNK bytes). */
static void encode(Encoder *e, IdVec *out, const unsigned char *data, size_t n) {
    Cache *c = &e->cache;
    for (size_t i = 0; i < n;) {
        size_t j = next_chunk(data, n, i);
        const unsigned char *chunk = data + i;
        size_t len = j - i;
        i = j;
        if (len == 1) {
            idvec_reserve(out, 1);
            out->v[out->len++] = chunk[0];
            continue;
        }
        if (len > CACHE_MAX_CHUNK) {
            merge_chunk(e, out, chunk, len);
            continue;
        }
        uint64_t h = hash_bytes(chunk, len);
        CacheSlot *s = cache_find(c, chunk, len, h);
        if (s->key_len != 0) {
            idvec_reserve(out, s->ids_len);
            memcpy(out->v + out->len, c->ids + s->ids_off, s->ids_len * sizeof *out->v);
            out->len += s->ids_len;
            continue;
        }
        size_t start = out->len;
        merge_chunk(e, out, chunk, len);
        if (c->entries >= CACHE_MAX_ENTRIES) {
            cache_clear(c);
            s = cache_find(c, chunk, len, h);
        }
        cache_put(c, s, chunk, len, h, out->v + start, out->len - start);
    }
}

/* ------------------------------------------------------------------ main */

static void usage_error(const char *msg) {
    fprintf(stderr, PROG ": error: %s; " USAGE "\n", msg);
    exit(EXIT_USAGE);
}

int main(int argc, char **argv) {
    const char *merges_path = NULL, *in_path = NULL, *out_path = NULL;
    /* --flag value and --flag=value (one or two dashes), like Go's flag package; a
     * value is any bytes, an empty one included (it names no file, not no flag). */
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "-help") == 0 || strcmp(arg, "--help") == 0) {
            puts(USAGE);
            return 0;
        }
        const char *name = arg;
        if (name[0] != '-') usage_error("unexpected argument");
        name += name[1] == '-' ? 2 : 1;
        const char *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        const char **slot = NULL;
        if (name_len == 6 && strncmp(name, "merges", 6) == 0)
            slot = &merges_path;
        else if (name_len == 2 && strncmp(name, "in", 2) == 0)
            slot = &in_path;
        else if (name_len == 3 && strncmp(name, "out", 3) == 0)
            slot = &out_path;
        else
            usage_error("unknown option");
        if (eq) {
            *slot = eq + 1;
        } else {
            if (a + 1 >= argc) usage_error("option needs a value");
            *slot = argv[++a];
        }
    }
    if (merges_path == NULL || in_path == NULL || out_path == NULL) usage_error("--merges, --in and --out are required");

    init_classes();
    unsigned char *raw;
    size_t raw_len;
    g_oom_path = merges_path;
    int err = read_file(merges_path, &raw, &raw_len);
    if (err) fail(EXIT_MERGES_READ, merges_path, "cannot read merges file: %s", strerror(err));
    Merges merges;
    if (!parse_merges(raw, raw_len, &merges) || !validate_merges(&merges)) {
        if (g_line) fail(EXIT_MERGES_CORRUPT, merges_path, "line %zu: corrupt merges file: %s", g_line, g_msg);
        fail(EXIT_MERGES_CORRUPT, merges_path, "corrupt merges file: %s", g_msg);
    }
    free(raw);

    unsigned char *corpus;
    size_t corpus_len;
    g_oom_path = in_path;
    err = read_file(in_path, &corpus, &corpus_len);
    if (err) fail(EXIT_CORPUS, in_path, "cannot read corpus: %s", strerror(err));
    if (corpus_len > MAX_CHUNK) {
        for (size_t i = 0; i < corpus_len;) {
            size_t j = next_chunk(corpus, corpus_len, i);
            if (j - i > MAX_CHUNK)
                fail(EXIT_TOO_LARGE, in_path,
                     "cannot tokenize: the pre-token at byte %zu is %zu bytes long, more than the %zu this program merges",
                     i, j - i, MAX_CHUNK);
            i = j;
        }
    }
    Encoder enc;
    encoder_init(&enc, &merges);
    IdVec ids = {NULL, 0, 0};
    idvec_reserve(&ids, corpus_len / 3 + 16);
    encode(&enc, &ids, corpus, corpus_len);

    g_oom_path = out_path;
    err = write_ids(out_path, ids.v, ids.len);
    if (err) fail(EXIT_OUTPUT, out_path, "cannot write ids file: %s", strerror(err));
    return 0;
}
