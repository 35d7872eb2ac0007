/* panstream.inputs._v6: the first pass of the IPv6 reader, one C loop over the tokens (issue 38).
 *
 * hex_words(w, tlen, hi, lo, ok, canon, text_only) reads each token w[i, :tlen[i]] as the hex
 * part of an IPv6 address, exactly as panstream.inputs.ipv6._hex_words(w, tlen, 0, fields=8,
 * canon=True, text_only=text_only) does with NumPy (that function stays the reference and the
 * fallback when this module is not built or PANSTREAM_NATIVE=0):
 *
 *   accepted (ok[i] = 1): 2 to 39 bytes, each a hex digit (either case) or ':'; groups of one to
 *     four digits; one '::' at most (':::' is two); no single colon at either end; at most eight
 *     fields (at most seven colons); eight groups without '::', at most seven with it.
 *   hi[i], lo[i]: the address's two 64-bit halves (glibc inet_pton's value); 0 where not ok.
 *   canon[i]: the token is the address's RFC 5952 text (lowercase, no leading zero, the longest
 *     run of two or more zero words compressed and no other, the first of equal runs).
 *   text_only (nonzero): where canon[i] and the token is not IPv4-mapped ("::ffff:x:y"), hi[i]
 *     and lo[i] are 0 (the sketch hashes the text; its key is not needed).
 *
 * first_blank(w, out) sets out[i] to where row i of w has its first byte at or below the space
 * (64 if none): where the reader's token ends (_ctz64(_mask64(w <= 32)) of the NumPy path).
 *
 * Every row is decided here (none is left to NumPy). Where NumPy's hi/lo of a refused row are
 * unspecified ("garbage where not ok"), these are 0.
 *
 *   w      a C-contiguous 2-D buffer of unsigned bytes (n x width, width >= 48, as NumPy asks):
 *          the windows
 *   tlen   a C-contiguous buffer of n int64 token lengths (any value: outside 2..39 is refused;
 *          the bytes past tlen[i] may be read, never used)
 *   hi, lo writable C-contiguous buffers of n uint64
 *   ok, canon writable C-contiguous buffers of n bytes (uint8 or bool), set to 0 or 1
 *
 * A buffer of another type or layout raises TypeError (the Python side then takes the NumPy
 * path), lengths that differ raise ValueError; nothing is written before every check passed.
 * The loop runs without the GIL.
 *
 * Privacy (invariant 1 of docs/design.md): the module allocates nothing and keeps nothing. It
 * reads the caller's windows where they lie, writes only the caller's outputs, and overwrites its
 * own stack copy of the last token's words before returning; the caller wipes its buffers as
 * before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_HEX 39 /* the longest hex part: eight groups of four digits and seven colons */
#define MIN_WIDTH 48 /* the bytes of a row read: its first 48 (the masks), 4 from a field start */

/* Eight bytes at a time (SWAR): a byte test over a 64-bit word leaves each byte's answer in its
 * high bit, and movemask() gathers the eight answers into eight bits, as the NumPy path's
 * _mask64 does over a row. Only bytes below 0x80 are tested; the others are refused apart. */
#define ONES 0x0101010101010101ULL
#define HIGH 0x8080808080808080ULL
#define LOW7 0x7F7F7F7F7F7F7F7FULL

/* The bytes at p as a little-endian word (load64, load32) or a big-endian one (load_be64),
 * whatever the machine's order; TO_BE16(v): v as it lies in memory big-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define FROM_LE64(x) __builtin_bswap64(x)
#define FROM_LE32(x) __builtin_bswap32(x)
#define TO_BE16(x) (x)
#else
#define FROM_LE64(x) (x)
#define FROM_LE32(x) (x)
#define TO_BE16(x) __builtin_bswap16(x)
#endif

static inline uint64_t
load64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, sizeof x);
    return FROM_LE64(x);
}

static inline uint32_t
load32(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, sizeof x);
    return FROM_LE32(x);
}

static inline uint64_t
load_be64(const uint8_t *p)
{
    return __builtin_bswap64(load64(p));
}

/* The high bit of each byte of x7 (every byte below 0x80) that is >= n (1 <= n <= 0x80): no sum
 * passes 0xFE, so no carry crosses a byte. */
#define GE(x7, n) (((x7) + (uint64_t)(0x80 - (n)) * ONES) & HIGH)

/* The high bit of each zero byte of x (exact: no carry crosses a byte). */
static inline uint64_t
zero_bytes(uint64_t x)
{
    return ~(((x & LOW7) + LOW7) | x | LOW7);
}

/* The high bits of m (nothing else set) as eight bits, bit j for byte j. */
static inline uint64_t
movemask(uint64_t m)
{
    return ((m >> 7) * 0x0102040810204080ULL) >> 56;
}

/* The value of the 1 to 4 hex digits at p (checked already), the first the most significant:
 * the four bytes become nibbles in place (c & 15, plus 9 for a letter), are right-aligned by
 * one shift that drops the bytes past the field (the last digit in the top byte), byte-swapped
 * (the last digit in the low byte) and packed in two steps (the NumPy path's decode). */
static inline uint16_t
hex_value(const uint8_t *p, int len)
{
    uint32_t x = load32(p);
    uint32_t d = (x & 0x0F0F0F0Fu) + ((x >> 6) & 0x01010101u) * 9u;
    d = __builtin_bswap32(d << (32 - 8 * len));
    d = (d | d >> 4) & 0x00FF00FFu; /* two digits a byte: bytes 0 and 2 */
    return (uint16_t)(d | d >> 8);
}

/* Four bits, bit j where 16-bit word j of k (word 0 the highest) is 0: the exact zero test of
 * zero_bytes, on 16-bit lanes. */
static inline unsigned
zero_words(uint64_t k)
{
    const uint64_t low15 = 0x7FFF7FFF7FFF7FFFULL;
    uint64_t y = ~(((k & low15) + low15) | k | low15); /* bit 16i + 15: lane i is 0 */
    return (unsigned)((y >> 63 & 1) | (y >> 46 & 2) | (y >> 29 & 4) | (y >> 12 & 8));
}

/* For every 8-bit mask of zero words (bit j: word j is 0): where the longest run of two or more
 * zero words starts (the first of equal runs; 8 if none), and its length (0 if none). */
static uint8_t RUN_BASE[256], RUN_LEN[256];

static void
init_runs(void)
{
    for (int m = 0; m < 256; m++) {
        int best = 8, blen = 0, j = 0;
        while (j < 8) {
            if (m >> j & 1) {
                int k = j;
                while (k < 8 && (m >> k & 1))
                    k++;
                if (k - j > blen) {
                    best = j;
                    blen = k - j;
                }
                j = k;
            }
            else
                j++;
        }
        RUN_BASE[m] = (uint8_t)(blen >= 2 ? best : 8);
        RUN_LEN[m] = (uint8_t)(blen >= 2 ? blen : 0);
    }
}

/* The first 48 bytes of a row as four 48-bit masks (bit p: byte p): the bytes that are a hex
 * digit or ':', the colons, the '0's, and the bytes without 0x20 (of the good ones: 'A' to 'F').
 * SSE2 (every x86-64) tests 16 bytes at once; elsewhere eight at a time in a 64-bit word. */
static inline void
row_masks(const uint8_t *s, uint64_t *good, uint64_t *colon, uint64_t *zero, uint64_t *upper)
{
    uint64_t g = 0, c = 0, z = 0, u = 0;
#if defined(__SSE2__)
    const __m128i k_colon = _mm_set1_epi8(':'), k_zero = _mm_set1_epi8('0');
    const __m128i k_ten = _mm_set1_epi8(10), k_five = _mm_set1_epi8(5);
    const __m128i k_a = _mm_set1_epi8('a'), k_20 = _mm_set1_epi8(0x20);
    for (int k = 0; k < 3; k++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(s + 16 * k));
        /* unsigned x - '0' <= 10 ('0' to '9', ':'), (x | 0x20) - 'a' <= 5 ('a' to 'f', either
         * case): a <= b exactly where min(a, b) == a */
        __m128i d = _mm_sub_epi8(x, k_zero);
        __m128i is_digit = _mm_cmpeq_epi8(_mm_min_epu8(d, k_ten), d);
        __m128i l = _mm_sub_epi8(_mm_or_si128(x, k_20), k_a);
        __m128i is_letter = _mm_cmpeq_epi8(_mm_min_epu8(l, k_five), l);
        int sh = 16 * k;
        g |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_or_si128(is_digit, is_letter)) << sh;
        c |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, k_colon)) << sh;
        z |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, k_zero)) << sh;
        u |= (uint64_t)(unsigned)_mm_movemask_epi8(
                 _mm_cmpeq_epi8(_mm_and_si128(x, k_20), _mm_setzero_si128())) << sh;
    }
#else
    for (int k = 0; k < 6; k++) {
        uint64_t x = load64(s + 8 * k), x7 = x & LOW7;
        uint64_t digit = GE(x7, '0') & ~GE(x7, ':' + 1); /* '0' to '9', and ':' */
        uint64_t l = x7 | 0x20 * ONES;
        uint64_t letter = GE(l, 'a') & ~GE(l, 'g'); /* 'a' to 'f', 'A' to 'F' */
        int sh = 8 * k;
        g |= movemask((digit | letter) & ~x) << sh; /* (no byte from 0x80 up) */
        c |= movemask(zero_bytes(x ^ ':' * ONES)) << sh;
        z |= movemask(zero_bytes(x ^ '0' * ONES)) << sh;
        u |= movemask(~(x << 2) & HIGH) << sh;
    }
#endif
    *good = g;
    *colon = c;
    *zero = z;
    *upper = u;
}

/* The eight words of a token with '::'. Wiped after the loop. */
struct token {
    uint16_t words[8];
};

/* Whether the '::' of a token without upper case or leading zeros stands for its longest run of
 * two or more zero words, the first of equal runs (RFC 5952), from its colons (cm), length h,
 * the z words '::' stands for, and its "0" fields (zf, bit p: a field "0" starts at p): the
 * fields walked as the decode walks them, without reading their digits. */
static int
zero_run_is_dc(uint64_t cm, int64_t h, int z, uint64_t zf)
{
    uint64_t rest = cm | (uint64_t)1 << h;
    unsigned zm = 0; /* bit j: word j is 0 */
    int cnt = 0, seen = 0, dcw = 0, at = 0;
    while (rest) {
        int end = __builtin_ctzll(rest);
        rest &= rest - 1;
        if (end > at) {
            zm |= (unsigned)(zf >> at & 1) << ((seen ? z : 0) + cnt);
            cnt++;
            dcw += !seen;
        }
        else
            seen = 1;
        at = end + 1;
    }
    zm |= ((1u << z) - 1) << dcw; /* the words of '::' */
    return dcw == RUN_BASE[zm] && z == RUN_LEN[zm];
}

/* One token: returns ok; sets *hi, *lo (0 unless ok) and *canon. The checks are the NumPy
 * path's, on the same 64-bit masks (bit p: byte p), so a token is refused for the same reasons:
 * reading the first 48 bytes of its row. */
static int
read_token(const uint8_t *s, int64_t h, int text_only, struct token *t, uint64_t *hi,
           uint64_t *lo, uint8_t *canon)
{
    *hi = *lo = 0;
    *canon = 0;
    if (h < 2 || h > MAX_HEX)
        return 0;
    uint64_t good, colon, zero, upper;
    row_masks(s, &good, &colon, &zero, &upper);
    uint64_t low = ((uint64_t)1 << h) - 1;
    if ((good & low) != low)
        return 0; /* a byte that is neither a hex digit nor ':' */
    uint64_t cm = colon & low, digit = low & ~cm;
    uint64_t dc = cm & (cm >> 1); /* bit p: colons at p and p + 1 */
    if (dc & (dc - 1))
        return 0; /* two '::' (or ':::') */
    if ((cm & 3) == 1)
        return 0; /* a leading single colon */
    if (((cm >> (h - 2)) & 3) == 2)
        return 0; /* a trailing single colon */
    uint64_t five = digit & (digit >> 1);
    five &= five >> 2;
    five &= digit >> 4;
    if (five)
        return 0; /* a group of five digits or more */
    int colons = __builtin_popcountll(cm);
    if (colons > 7)
        return 0; /* more than eight fields (nine: the NumPy second pass) */
    int has_dc = dc != 0;
    int nfull = colons + 1 - has_dc - (int)(dc & 1) - (int)((dc >> (h - 2)) & 1);
    if (has_dc ? nfull > 7 : nfull != 8)
        return 0;
    /* an upper-case digit, or a leading zero ('0' opening a group, a digit after it) */
    int bad = ((upper | (zero & ((cm << 1) | 1) & (digit >> 1))) & low) != 0;
    int z = 8 - nfull, mapped = colons == 4 && h >= 7 && memcmp(s, "::ffff:", 7) == 0;
    if (text_only && !bad) {
        /* The sketch's reading: a token that is its RFC 5952 text is not decoded. Its zero words
         * are its "0" fields (a field of one '0': no leading zero) and the words of '::'. */
        uint64_t zf = zero & ((cm << 1) | 1) & ((cm >> 1) | (uint64_t)1 << (h - 1)) & low;
        int rfc = has_dc ? zero_run_is_dc(cm, h, z, zf) : (zf & (zf >> 2)) == 0;
        if (rfc && !mapped) {
            *canon = 1;
            return 1; /* its text stands for it: the key is left 0 */
        }
    }
    /* The words: field j is word j, except after the '::': there the fields move to the right
     * end (z zero words between). Each field ends at the next colon, the last at the end. */
    uint64_t rest = cm | (uint64_t)1 << h; /* (h <= 39) */
    uint64_t khi = 0, klo = 0;
    int dcw = 8, at = 0; /* dcw: the word the '::' starts at */
    if (!has_dc) { /* eight fields, none empty: shifted in, word after word */
        for (int j = 0; j < 8; j++) {
            int end = __builtin_ctzll(rest);
            rest &= rest - 1;
            uint64_t v = hex_value(s + at, end - at);
            at = end + 1;
            if (j < 4)
                khi = khi << 16 | v;
            else
                klo = klo << 16 | v;
        }
    }
    else { /* placed in t->words, big-endian, so the two halves are two 8-byte loads */
        int cnt = 0, seen = 0;
        dcw = 0;
        memset(t->words, 0, sizeof t->words);
        for (int j = 0; j <= colons; j++) {
            int end = __builtin_ctzll(rest);
            rest &= rest - 1;
            int len = end - at;
            if (len) {
                t->words[(seen ? z : 0) + cnt] = TO_BE16(hex_value(s + at, len));
                cnt++;
                dcw += !seen;
            }
            else
                seen = 1;
            at = end + 1;
        }
        khi = load_be64((const uint8_t *)t->words);
        klo = load_be64((const uint8_t *)(t->words + 4));
    }
    if (!bad) {
        unsigned zm = zero_words(khi) | zero_words(klo) << 4; /* bit j: word j is 0 */
        *canon = (uint8_t)(has_dc ? (dcw == RUN_BASE[zm] && z == RUN_LEN[zm]) : RUN_LEN[zm] == 0);
    }
    if (text_only && *canon && !mapped)
        return 1; /* (not reached: told above without the decode) */
    *hi = khi;
    *lo = klo;
    return 1;
}

/* --------------------------------------------------------------------------- buffer checks */

/* The format without its byte-order prefix, or NULL if the order is not the machine's. */
static const char *
plain_format(const Py_buffer *b)
{
    const char *f = b->format ? b->format : "B";
#if PY_LITTLE_ENDIAN
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    else if (*f == '>' || *f == '!')
        return NULL;
#else
    if (*f == '@' || *f == '=' || *f == '>' || *f == '!')
        f++;
    else if (*f == '<')
        return NULL;
#endif
    return f;
}

/* Whether b holds items of `size` bytes of one of the struct-module codes in `codes`, in the
 * machine's byte order: holds(b, 1, "B?") uint8 or bool, holds(b, 8, "ql") int64,
 * holds(b, 8, "QL") uint64. */
static int
holds(const Py_buffer *b, Py_ssize_t size, const char *codes)
{
    const char *f = plain_format(b);
    return f && b->itemsize == size && f[0] != '\0' && f[1] == '\0' && strchr(codes, f[0]);
}

enum { W, TLEN, HI, LO, OK, CANON, NBUF };
static const char *const NAMES[NBUF] = {"w", "tlen", "hi", "lo", "ok", "canon"};

static PyObject *
hex_words(PyObject *self, PyObject *args)
{
    PyObject *obj[NBUF];
    Py_buffer buf[NBUF];
    int got = 0, text_only = 0;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOp:hex_words", &obj[W], &obj[TLEN], &obj[HI], &obj[LO],
                          &obj[OK], &obj[CANON], &text_only))
        return NULL;
    for (; got < NBUF; got++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
        if (got >= HI)
            flags |= PyBUF_WRITABLE;
        if (PyObject_GetBuffer(obj[got], &buf[got], flags) < 0) {
            PyErr_Format(PyExc_TypeError, "hex_words: %s must be a C-contiguous%s buffer",
                         NAMES[got], got >= HI ? " writable" : "");
            goto done;
        }
    }
    if (buf[W].ndim != 2 || !holds(&buf[W], 1, "B?")) {
        PyErr_SetString(PyExc_TypeError, "hex_words: w must be a 2-D buffer of uint8");
        goto done;
    }
    if (!holds(&buf[TLEN], 8, "ql") || !holds(&buf[HI], 8, "QL") || !holds(&buf[LO], 8, "QL") ||
        !holds(&buf[OK], 1, "B?") || !holds(&buf[CANON], 1, "B?")) {
        PyErr_SetString(PyExc_TypeError,
                        "hex_words: tlen must hold int64, hi and lo uint64, ok and canon uint8 "
                        "or bool");
        goto done;
    }
    Py_ssize_t n = buf[W].shape[0], width = buf[W].shape[1];
    if (width < MIN_WIDTH) {
        PyErr_Format(PyExc_ValueError, "hex_words: w's rows are %zd bytes, fewer than %d",
                     width, MIN_WIDTH);
        goto done;
    }
    for (int k = TLEN; k < NBUF; k++) {
        if (buf[k].len / buf[k].itemsize != n) {
            PyErr_Format(PyExc_ValueError, "hex_words: w has %zd rows but %s %zd entries", n,
                         NAMES[k], buf[k].len / buf[k].itemsize);
            goto done;
        }
    }

    const uint8_t *w = buf[W].buf;
    const int64_t *tlen = buf[TLEN].buf;
    uint64_t *hi = buf[HI].buf, *lo = buf[LO].buf;
    uint8_t *ok = buf[OK].buf, *canon = buf[CANON].buf;
    Py_BEGIN_ALLOW_THREADS
    struct token t;
    memset(&t, 0, sizeof t);
    for (Py_ssize_t i = 0; i < n; i++)
        ok[i] = (uint8_t)read_token(w + i * width, tlen[i], text_only, &t, &hi[i], &lo[i],
                                    &canon[i]);
    /* The last token's fields and words, on this stack: overwritten (volatile stores are not
     * elided). */
    volatile uint8_t *vt = (volatile uint8_t *)&t;
    for (size_t j = 0; j < sizeof t; j++)
        vt[j] = 0;
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);

done:
    while (got > 0)
        PyBuffer_Release(&buf[--got]);
    return result;
}

/* ------------------------------------------------------------------------------ first_blank */

/* Where the first byte of a row at or below the space is (a space, a control byte, NUL), 64 if
 * none: _ctz64(_mask64(w <= 32)) of the NumPy path, for rows of at most 64 bytes. */
static int64_t
first_blank_row(const uint8_t *r, Py_ssize_t width)
{
#if defined(__SSE2__)
    if (width == 64) {
        const __m128i k_space = _mm_set1_epi8(' ');
        uint64_t m = 0;
        for (int k = 0; k < 4; k++) {
            __m128i x = _mm_loadu_si128((const __m128i *)(r + 16 * k));
            __m128i le = _mm_cmpeq_epi8(_mm_min_epu8(x, k_space), x); /* x <= ' ' */
            m |= (uint64_t)(unsigned)_mm_movemask_epi8(le) << 16 * k;
        }
        return m ? __builtin_ctzll(m) : 64;
    }
#endif
    for (Py_ssize_t p = 0; p < width; p++)
        if (r[p] <= ' ')
            return p;
    return 64;
}

static PyObject *
first_blank(PyObject *self, PyObject *args)
{
    PyObject *ow, *oout;
    Py_buffer w, out;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "OO:first_blank", &ow, &oout))
        return NULL;
    if (PyObject_GetBuffer(ow, &w, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_SetString(PyExc_TypeError, "first_blank: w must be a C-contiguous buffer");
        return NULL;
    }
    if (PyObject_GetBuffer(oout, &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyErr_SetString(PyExc_TypeError, "first_blank: out must be a writable C-contiguous buffer");
        PyBuffer_Release(&w);
        return NULL;
    }
    if (w.ndim != 2 || !holds(&w, 1, "B?") || !holds(&out, 8, "ql")) {
        PyErr_SetString(PyExc_TypeError,
                        "first_blank: w must be a 2-D buffer of uint8, out a buffer of int64");
        goto done;
    }
    Py_ssize_t n = w.shape[0], width = w.shape[1];
    if (width > 64 || out.len / out.itemsize != n) {
        PyErr_Format(PyExc_ValueError,
                     "first_blank: w must have rows of at most 64 bytes (%zd) and out one entry "
                     "a row (%zd rows, %zd entries)", width, n, out.len / out.itemsize);
        goto done;
    }
    const uint8_t *rows = w.buf;
    int64_t *o = out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        o[i] = first_blank_row(rows + i * width, width);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);

done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&w);
    return result;
}

static PyMethodDef methods[] = {
    {"hex_words", hex_words, METH_VARARGS,
     "hex_words(w, tlen, hi, lo, ok, canon, text_only)\n--\n\n"
     "Read w[i, :tlen[i]] as the hex part of an IPv6 address into the caller's arrays: the\n"
     "halves hi[i], lo[i] (0 where refused), ok[i], canon[i] (RFC 5952 text); with text_only the\n"
     "RFC 5952 rows that are not IPv4-mapped get the key 0. The semantics of\n"
     "panstream.inputs.ipv6._hex_words(w, tlen, 0, fields=8, canon=True, text_only=...). Runs\n"
     "without the GIL; allocates nothing."},
    {"first_blank", first_blank, METH_VARARGS,
     "first_blank(w, out)\n--\n\n"
     "out[i] = where row i of w (at most 64 bytes) has its first byte at or below the space, 64\n"
     "if none: _ctz64(_mask64(w <= 32)) of panstream.inputs.ipv6. Runs without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "panstream.inputs._v6",
    "The IPv6 reader's first pass in one C loop (optional C kernel; see ipv6._first_pass).",
    -1,
    methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__v6(void)
{
    init_runs();
    return PyModule_Create(&module);
}
