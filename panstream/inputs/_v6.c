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
 * Every row is decided here (none is left to NumPy). Where NumPy's hi/lo of a refused row are
 * unspecified ("garbage where not ok"), these are 0.
 *
 *   w      a C-contiguous 2-D buffer of unsigned bytes (n x width, width >= 39): the windows
 *   tlen   a C-contiguous buffer of n int64 token lengths (any value: outside 2..39 is refused;
 *          bytes past tlen[i] are never read)
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

#define MAX_HEX 39 /* the longest hex part: eight groups of four digits and seven colons */

/* One nibble per byte: the value of a hex digit, 16 for ':', 255 for anything else. */
static uint8_t NIB[256];

static void
init_table(void)
{
    memset(NIB, 255, sizeof NIB);
    for (int c = '0'; c <= '9'; c++)
        NIB[c] = (uint8_t)(c - '0');
    for (int c = 'a'; c <= 'f'; c++) {
        NIB[c] = (uint8_t)(c - 'a' + 10);
        NIB[c - 32] = (uint8_t)(c - 'a' + 10);
    }
    NIB[':'] = 16;
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

/* The fields of one token as read (their values, and which are empty), then its eight words.
 * Wiped after the loop. */
struct token {
    uint32_t field[8];
    uint8_t full[8];
    uint16_t words[8];
};

/* One token, read in one pass over its bytes: returns ok; sets *hi, *lo (0 unless ok) and
 * *canon. */
static int
read_token(const uint8_t *s, int64_t h, int text_only, struct token *t, uint64_t *hi,
           uint64_t *lo, uint8_t *canon)
{
    *hi = *lo = 0;
    *canon = 0;
    if (h < 2 || h > MAX_HEX)
        return 0;
    uint64_t cm = 0; /* bit p: a colon at p */
    int run = 0, nf = 0, bad = 0;
    uint32_t v = 0;
    for (int p = 0; p < h; p++) {
        uint8_t c = s[p];
        uint8_t x = NIB[c];
        if (x == 16) {
            if (nf == 7)
                return 0; /* more than eight fields (nine: the NumPy second pass) */
            cm |= (uint64_t)1 << p;
            t->field[nf] = v;
            t->full[nf++] = (uint8_t)(run != 0);
            v = 0;
            run = 0;
            continue;
        }
        if (x == 255)
            return 0; /* a byte that is neither a hex digit nor ':' */
        /* an upper-case digit; a leading zero: '0' opening a group with a digit after it */
        bad |= (c >= 'A' && c <= 'F') | (run == 0 && c == '0' && p + 1 < h && s[p + 1] != ':');
        if (++run > 4)
            return 0; /* a group of five digits or more */
        v = v << 4 | x;
    }
    t->field[nf] = v;
    t->full[nf++] = (uint8_t)(run != 0);
    uint64_t dc = cm & (cm >> 1); /* bit p: colons at p and p + 1 */
    if (dc & (dc - 1))
        return 0; /* two '::' (or ':::') */
    if ((cm & 3) == 1)
        return 0; /* a leading single colon */
    if (((cm >> (h - 2)) & 3) == 2)
        return 0; /* a trailing single colon */
    int has_dc = dc != 0;
    int nfull = nf - has_dc - (int)(dc & 1) - (int)((dc >> (h - 2)) & 1);
    if (has_dc ? nfull > 7 : nfull != 8)
        return 0;
    /* The words: field j is word j, except after the '::': there the fields move to the right
     * end (z zero words between). */
    int z = 8 - nfull, cnt = 0, seen = 0, dcw = 0;
    if (has_dc) {
        memset(t->words, 0, sizeof t->words);
        for (int j = 0; j < nf; j++) {
            if (t->full[j]) {
                t->words[(seen ? z : 0) + cnt] = (uint16_t)t->field[j];
                cnt++;
                dcw += !seen;
            }
            else
                seen = 1;
        }
    }
    else {
        for (int j = 0; j < 8; j++)
            t->words[j] = (uint16_t)t->field[j];
    }
    if (!bad) {
        unsigned zm = 0;
        for (int j = 0; j < 8; j++)
            zm |= (unsigned)(t->words[j] == 0) << j;
        *canon = (uint8_t)(has_dc ? (dcw == RUN_BASE[zm] && z == RUN_LEN[zm]) : RUN_LEN[zm] == 0);
    }
    if (text_only && *canon && !(nf == 5 && h >= 7 && memcmp(s, "::ffff:", 7) == 0))
        return 1; /* its text stands for it: the key is left 0 */
    *hi = (uint64_t)t->words[0] << 48 | (uint64_t)t->words[1] << 32 |
          (uint64_t)t->words[2] << 16 | t->words[3];
    *lo = (uint64_t)t->words[4] << 48 | (uint64_t)t->words[5] << 32 |
          (uint64_t)t->words[6] << 16 | t->words[7];
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

static int
is_bytes(const Py_buffer *b)
{
    const char *f = plain_format(b);
    return f && b->itemsize == 1 && (strcmp(f, "B") == 0 || strcmp(f, "?") == 0);
}

static int
is_int64(const Py_buffer *b)
{
    const char *f = plain_format(b);
    return f && b->itemsize == 8 && (strcmp(f, "q") == 0 || strcmp(f, "l") == 0);
}

static int
is_uint64(const Py_buffer *b)
{
    const char *f = plain_format(b);
    return f && b->itemsize == 8 && (strcmp(f, "Q") == 0 || strcmp(f, "L") == 0);
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
    if (buf[W].ndim != 2 || !is_bytes(&buf[W])) {
        PyErr_SetString(PyExc_TypeError, "hex_words: w must be a 2-D buffer of uint8");
        goto done;
    }
    if (!is_int64(&buf[TLEN]) || !is_uint64(&buf[HI]) || !is_uint64(&buf[LO]) ||
        !is_bytes(&buf[OK]) || !is_bytes(&buf[CANON])) {
        PyErr_SetString(PyExc_TypeError,
                        "hex_words: tlen must hold int64, hi and lo uint64, ok and canon uint8 "
                        "or bool");
        goto done;
    }
    Py_ssize_t n = buf[W].shape[0], width = buf[W].shape[1];
    if (width < MAX_HEX) {
        PyErr_Format(PyExc_ValueError, "hex_words: w's rows are %zd bytes, fewer than %d",
                     width, MAX_HEX);
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

static PyMethodDef methods[] = {
    {"hex_words", hex_words, METH_VARARGS,
     "hex_words(w, tlen, hi, lo, ok, canon, text_only)\n--\n\n"
     "Read w[i, :tlen[i]] as the hex part of an IPv6 address into the caller's arrays: the\n"
     "halves hi[i], lo[i] (0 where refused), ok[i], canon[i] (RFC 5952 text); with text_only the\n"
     "RFC 5952 rows that are not IPv4-mapped get the key 0. The semantics of\n"
     "panstream.inputs.ipv6._hex_words(w, tlen, 0, fields=8, canon=True, text_only=...). Runs\n"
     "without the GIL; allocates nothing."},
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
    init_table();
    init_runs();
    return PyModule_Create(&module);
}
