/* hookkit.backends._cpu_kernels: the monitoring statistics of a float32 buffer in host memory, one
   read per record, written straight into a preallocated row (no tensor, tuple or array per call).

   activation(x, near_zero, rows, k, step, call, factor, threads, hist, lo, hi)
       rows[k] = [step, call, n, mean, m2, count of x <= near_zero]      (m2: sum of squared deviations)
       hist[k] = torch.histc(x, hist.shape[1], lo, hi)                   (when hist is not None)
   tensor(x, rows, k, step, call, factor, threads)
       rows[k] = [step, call, n, sum, ||x||, max |x|]                    (max |x| is NaN when any x is)

   rows: writable C-contiguous float64 [capacity, 6]; hist: writable C-contiguous float64
   [capacity, bins]; x: C-contiguous float32 of any shape. Every buffer's format, shape and
   writability are checked (ValueError naming the argument); nothing is written when a check fails.
   After [step, call, n] come the three values of the backends' rows (Backend.activation_sums and
   param_sums: the framework-ops route computes the same row on other devices). ``factor``: each value of x stands for ``factor`` values (a stride-0 expanded tensor
   compacted by the caller): n, the sums, the count and the histogram are multiplied by it.

   Why C: the statistics are memory-bound (one read, ~0.3 ns a value), and per call the Python
   route cost more than the read itself on small layers (a reshape, numpy view, row array and
   tensor per call). torch.histc on the CPU is a scalar loop (3-11 ns a value); here each 2048-value
   block's bin slots are computed with vector instructions, then counted into TABLES interleaved
   tables, dropped values spread over DROPS spare slots (no store-to-load stall on runs of one slot).

   Exactness: histc's own float32 slot formula, (x - lo) * bins / (hi - lo) truncated, x == hi (and
   anything rounding to bins) in the last bin; x outside [lo, hi] or NaN dropped. Built with
   -ffp-contract=off and without fast-math so the compiler keeps those roundings. Sums in float64
   lanes; the variance takes a second, centered pass when mean**2 / var > 1e4 (the one-pass formula
   would cancel). Large buffers are split across ``threads`` POSIX threads (the GIL is released). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifndef _WIN32
#include <pthread.h>
#endif

#define BLOCK 2048
#define TABLES 8
#define DROPS 16
#define MAX_BINS (1 << 24)
#define MAX_THREADS 64
#define VALUES_PER_THREAD (1 << 20) /* below this, starting a thread costs more than it saves */
#define WELL_CONDITIONED 1e4
#define ROW 6

typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));
typedef int32_t v4i __attribute__((vector_size(16)));

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define MULTIVERSION
#endif

/* One thread's share of a pass. */
typedef struct {
    const float *x;
    Py_ssize_t n;
    float near_zero;
    int want_max, centered;
    double center;
    int64_t *tables; /* TABLES * (bins + 1 + DROPS), or NULL */
    Py_ssize_t bins;
    float lo, hi;
    double sum, ssq;
    int64_t count;
    uint32_t maxbits;
} Part;

MULTIVERSION static void block_moments(const float *x, Py_ssize_t m, float near_zero, Part *p) {
    v4d s0 = {0}, s1 = {0}, q0 = {0}, q1 = {0};
    v4i c = {0};
    const v4f nz = {near_zero, near_zero, near_zero, near_zero};
    Py_ssize_t j = 0;
    for (; j + 8 <= m; j += 8) {
        v4f a, b;
        memcpy(&a, x + j, sizeof a);
        memcpy(&b, x + j + 4, sizeof b);
        v4d da = __builtin_convertvector(a, v4d), db = __builtin_convertvector(b, v4d);
        s0 += da;
        s1 += db;
        q0 += da * da;
        q1 += db * db;
        c -= (a <= nz) + (b <= nz); /* a true lane is -1 */
    }
    double sum = 0, ssq = 0;
    int64_t count = 0;
    for (int k = 0; k < 4; k++) {
        sum += s0[k] + s1[k];
        ssq += q0[k] + q1[k];
        count += c[k];
    }
    for (; j < m; j++) {
        const float v = x[j];
        sum += v;
        ssq += (double)v * v;
        count += v <= near_zero;
    }
    p->sum += sum;
    p->ssq += ssq;
    p->count += count;
}

/* Sum of (x - center)**2 in float64: the second pass of an ill-conditioned variance. */
MULTIVERSION static double block_centered(const float *x, Py_ssize_t m, double center) {
    v4d q0 = {0}, q1 = {0};
    const v4d c = {center, center, center, center};
    Py_ssize_t j = 0;
    for (; j + 8 <= m; j += 8) {
        v4f a, b;
        memcpy(&a, x + j, sizeof a);
        memcpy(&b, x + j + 4, sizeof b);
        v4d da = __builtin_convertvector(a, v4d) - c, db = __builtin_convertvector(b, v4d) - c;
        q0 += da * da;
        q1 += db * db;
    }
    double ssq = 0;
    for (int k = 0; k < 4; k++)
        ssq += q0[k] + q1[k];
    for (; j < m; j++) {
        const double d = (double)x[j] - center;
        ssq += d * d;
    }
    return ssq;
}

/* max |x| on the bit patterns: with the sign bit cleared, float order is integer order, and a NaN
   is above +Inf, so the integer max (vectorized by the compiler) is NaN when any value is. */
MULTIVERSION static uint32_t block_max_abs_bits(const float *x, Py_ssize_t m, uint32_t acc) {
    for (Py_ssize_t j = 0; j < m; j++) {
        uint32_t b;
        memcpy(&b, x + j, sizeof b);
        b &= 0x7fffffffu;
        acc = b > acc ? b : acc;
    }
    return acc;
}

/* Slot p in 0..bins: histc's position p (p == bins: x == hi, folded into the last bin). A value
   outside [lo, hi] or NaN is dropped into one of DROPS spare slots, by its index: on a trained
   network most values can fall outside the range, and counting them all into one slot would chain
   every increment on the previous one. */
MULTIVERSION static void block_slots(const float *x, Py_ssize_t m, float lo, float hi, float fbins, int32_t *slot) {
    const float width = hi - lo;
    const int32_t drop = (int32_t)fbins + 1;
    for (Py_ssize_t j = 0; j < m; j++) {
        const float v = x[j];
        float y = (v - lo) * fbins / width;
        y = y < fbins ? y : fbins; /* in range y <= bins already; this keeps the cast defined */
        y = y > 0.0f ? y : 0.0f;
        slot[j] = (v >= lo && v <= hi) ? (int32_t)y : drop + (int32_t)(j & (DROPS - 1));
    }
}

static void count_slots(const int32_t *slot, Py_ssize_t m, int64_t *tables, Py_ssize_t span) {
    Py_ssize_t j = 0;
    for (; j + TABLES <= m; j += TABLES)
        for (int t = 0; t < TABLES; t++)
            tables[t * span + slot[j + t]]++;
    for (; j < m; j++)
        tables[slot[j]]++;
}

static void *run_part(void *arg) {
    Part *p = (Part *)arg;
    int32_t slot[BLOCK];
    for (Py_ssize_t i = 0; i < p->n; i += BLOCK) {
        const Py_ssize_t m = p->n - i < BLOCK ? p->n - i : BLOCK;
        const float *x = p->x + i;
        if (p->centered) {
            p->ssq += block_centered(x, m, p->center);
            continue;
        }
        block_moments(x, m, p->near_zero, p);
        if (p->want_max)
            p->maxbits = block_max_abs_bits(x, m, p->maxbits);
        if (p->tables) {
            block_slots(x, m, p->lo, p->hi, (float)p->bins, slot);
            count_slots(slot, m, p->tables, p->bins + 1 + DROPS);
        }
    }
    return NULL;
}

/* Run the parts, all but the first on threads of their own (inline where a thread cannot start). */
static void run_parts(Part *parts, int count) {
#ifndef _WIN32
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int t = 1; t < count; t++)
        started[t] = pthread_create(&ids[t], NULL, run_part, &parts[t]) == 0;
    run_part(&parts[0]);
    for (int t = 1; t < count; t++) {
        if (started[t])
            pthread_join(ids[t], NULL);
        else
            run_part(&parts[t]);
    }
#else
    for (int t = 0; t < count; t++)
        run_part(&parts[t]);
#endif
}

/* Split [0, n) into `count` parts and run one pass over them; results summed into parts[0]. */
typedef struct {
    const float *x;
    Py_ssize_t n;
    int count;
    int64_t *tables[MAX_THREADS]; /* one histogram's tables per part, when counting */
    Part parts[MAX_THREADS];
} Passes;

static void pass(Passes *ps, const Part *proto, int counting) {
    const Py_ssize_t per = ps->n / ps->count;
    for (int t = 0; t < ps->count; t++) {
        ps->parts[t] = *proto;
        ps->parts[t].tables = counting ? ps->tables[t] : NULL;
        ps->parts[t].x = ps->x + per * t;
        ps->parts[t].n = t == ps->count - 1 ? ps->n - per * t : per;
    }
    run_parts(ps->parts, ps->count);
    for (int t = 1; t < ps->count; t++) {
        ps->parts[0].sum += ps->parts[t].sum;
        ps->parts[0].ssq += ps->parts[t].ssq;
        ps->parts[0].count += ps->parts[t].count;
        ps->parts[0].maxbits = ps->parts[t].maxbits > ps->parts[0].maxbits ? ps->parts[t].maxbits : ps->parts[0].maxbits;
    }
}

/* -- argument checks ------------------------------------------------------------------------------ */

static int is_format(const Py_buffer *b, char code) {
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    return f[0] == code && f[1] == '\0';
}

/* x: any C-contiguous float32 buffer. */
static int get_values(PyObject *obj, Py_buffer *x, const char *fn) {
    if (PyObject_GetBuffer(obj, x, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: x must be a C-contiguous float32 buffer; got %.100s (not contiguous, or no buffer)", fn,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (!is_format(x, 'f') || x->itemsize != 4) {
        PyErr_Format(PyExc_ValueError, "%s: x must be a float32 buffer; got format %.20s, %zd-byte items", fn, x->format ? x->format : "B",
                     x->itemsize);
        PyBuffer_Release(x);
        return -1;
    }
    return 0;
}

/* A writable C-contiguous float64 matrix [rows, cols] (cols == want_cols unless want_cols is 0). */
static int get_matrix(PyObject *obj, Py_buffer *b, const char *fn, const char *name, Py_ssize_t want_cols) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: %s must be a writable C-contiguous float64 matrix; got %.100s", fn, name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (!is_format(b, 'd') || b->itemsize != 8 || b->ndim != 2 || (want_cols && b->shape[1] != want_cols) || b->shape[1] < 1) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be a float64 matrix with %s columns; got format %.20s, %d dimensions", fn, name,
                     want_cols ? "6" : "one or more", b->format ? b->format : "B", b->ndim);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static int clamp_threads(int threads, Py_ssize_t n) {
    Py_ssize_t most = n / VALUES_PER_THREAD;
    if (threads > most)
        threads = (int)most;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    return threads < 1 ? 1 : threads;
}

/* -- activation ------------------------------------------------------------------------------------ */

static PyObject *activation(PyObject *self, PyObject *args) {
    PyObject *x_obj, *rows_obj, *hist_obj = Py_None;
    float near_zero, lo = 0, hi = 0;
    Py_ssize_t k;
    long long step, call, factor = 1;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OfOnLL|LiOff:activation", &x_obj, &near_zero, &rows_obj, &k, &step, &call, &factor, &threads, &hist_obj,
                          &lo, &hi))
        return NULL;
    Py_buffer x, rows, hist = {0};
    if (get_values(x_obj, &x, "activation") < 0)
        return NULL;
    if (get_matrix(rows_obj, &rows, "activation", "rows", ROW) < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    Passes *ps = NULL;
    const char *bad = NULL;
    if (k < 0 || k >= rows.shape[0])
        bad = "k must index a row of rows";
    else if (factor < 1)
        bad = "factor must be >= 1";
    else if (hist_obj != Py_None) {
        if (get_matrix(hist_obj, &hist, "activation", "hist", 0) < 0)
            goto fail;
        if (hist.shape[0] != rows.shape[0] || hist.shape[1] > MAX_BINS)
            bad = "hist must have as many rows as rows, and 1 to 2**24 columns (bins)";
        else if (!(lo < hi))
            bad = "lo < hi is needed for a histogram";
    }
    if (bad) {
        PyErr_Format(PyExc_ValueError, "activation: %s", bad);
        goto fail;
    }
    const Py_ssize_t n = x.len / 4, bins = hist.obj ? hist.shape[1] : 0, span = bins + 1 + DROPS;
    ps = PyMem_RawCalloc(1, sizeof(Passes));
    if (!ps) {
        PyErr_NoMemory();
        goto fail;
    }
    ps->x = (const float *)x.buf;
    ps->n = n;
    ps->count = clamp_threads(threads, n);
    Part proto = {0};
    proto.near_zero = near_zero;
    if (bins) {
        proto.bins = bins;
        proto.lo = lo;
        proto.hi = hi;
        for (int t = 0; t < ps->count; t++) {
            ps->tables[t] = PyMem_RawCalloc((size_t)TABLES * (size_t)span, sizeof(int64_t));
            if (!ps->tables[t]) {
                PyErr_NoMemory();
                goto fail;
            }
        }
    }
    double mean = NAN, m2 = 0;
    int64_t count = 0;
    Py_BEGIN_ALLOW_THREADS;
    if (n) {
        pass(ps, &proto, bins > 0);
        const Part *r = &ps->parts[0];
        count = r->count;
        mean = r->sum / (double)n;
        m2 = r->ssq - (double)n * mean * mean;
        if (m2 * WELL_CONDITIONED < (double)n * mean * mean) { /* var << mean**2: the one-pass formula cancels */
            Part centered = {0};
            centered.centered = 1;
            centered.center = mean;
            pass(ps, &centered, 0);
            m2 = ps->parts[0].ssq;
        }
        m2 = m2 < 0 ? 0 : m2; /* rounding below zero; NaN stays NaN */
    }
    Py_END_ALLOW_THREADS;
    double *row = (double *)rows.buf + k * ROW;
    row[0] = (double)step;
    row[1] = (double)call;
    row[2] = (double)n * (double)factor;
    row[3] = mean;
    row[4] = m2 * (double)factor;
    row[5] = (double)count * (double)factor;
    if (bins) {
        double *out = (double *)hist.buf + k * bins;
        memset(out, 0, (size_t)bins * sizeof(double));
        for (int t = 0; t < ps->count; t++)
            for (int s = 0; s < TABLES; s++) {
                const int64_t *table = ps->tables[t] + s * span;
                for (Py_ssize_t b = 0; b < bins; b++)
                    out[b] += (double)table[b];
                out[bins - 1] += (double)table[bins]; /* position == bins: x == hi, histc's last bin */
            }
        if (factor != 1)
            for (Py_ssize_t b = 0; b < bins; b++)
                out[b] *= (double)factor;
    }
    for (int t = 0; t < ps->count; t++)
        PyMem_RawFree(ps->tables[t]);
    PyMem_RawFree(ps);
    if (hist.obj)
        PyBuffer_Release(&hist);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;
fail:
    if (ps) {
        for (int t = 0; t < MAX_THREADS; t++)
            PyMem_RawFree(ps->tables[t]);
        PyMem_RawFree(ps);
    }
    if (hist.obj)
        PyBuffer_Release(&hist);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&x);
    return NULL;
}

/* -- tensor (gradients, parameters) ----------------------------------------------------------------- */

static PyObject *tensor(PyObject *self, PyObject *args) {
    PyObject *x_obj, *rows_obj;
    Py_ssize_t k;
    long long step, call, factor = 1;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OOnLL|Li:tensor", &x_obj, &rows_obj, &k, &step, &call, &factor, &threads))
        return NULL;
    Py_buffer x, rows;
    if (get_values(x_obj, &x, "tensor") < 0)
        return NULL;
    if (get_matrix(rows_obj, &rows, "tensor", "rows", ROW) < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    if (k < 0 || k >= rows.shape[0] || factor < 1) {
        PyErr_SetString(PyExc_ValueError, k < 0 || k >= rows.shape[0] ? "tensor: k must index a row of rows" : "tensor: factor must be >= 1");
        PyBuffer_Release(&rows);
        PyBuffer_Release(&x);
        return NULL;
    }
    const Py_ssize_t n = x.len / 4;
    Passes *ps = PyMem_RawCalloc(1, sizeof(Passes));
    if (!ps) {
        PyBuffer_Release(&rows);
        PyBuffer_Release(&x);
        return PyErr_NoMemory();
    }
    ps->x = (const float *)x.buf;
    ps->n = n;
    ps->count = clamp_threads(threads, n);
    Part proto = {0};
    proto.want_max = 1;
    Py_BEGIN_ALLOW_THREADS;
    if (n)
        pass(ps, &proto, 0);
    Py_END_ALLOW_THREADS;
    const Part *r = &ps->parts[0];
    float largest;
    memcpy(&largest, &r->maxbits, sizeof largest);
    double *row = (double *)rows.buf + k * ROW;
    row[0] = (double)step;
    row[1] = (double)call;
    row[2] = (double)n * (double)factor;
    row[3] = r->sum * (double)factor;
    row[4] = sqrt(r->ssq * (double)factor);
    row[5] = n ? (double)largest : NAN; /* no value, no max (as aminmax refuses an empty tensor) */
    PyMem_RawFree(ps);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&x);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"activation", activation, METH_VARARGS,
     "activation(x, near_zero, rows, k, step, call, factor=1, threads=1, hist=None, lo=0.0, hi=0.0)\n"
     "rows[k] = [step, call, n, mean, m2, count of x <= near_zero]; hist[k] = torch.histc(x, hist.shape[1], lo, hi)."},
    {"tensor", tensor, METH_VARARGS,
     "tensor(x, rows, k, step, call, factor=1, threads=1)\n"
     "rows[k] = [step, call, n, sum, ||x||, max |x| (NaN when any x is)]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu_kernels", "One-pass CPU statistics for hookkit.", -1, methods};

PyMODINIT_FUNC PyInit__cpu_kernels(void) { return PyModule_Create(&module); }
