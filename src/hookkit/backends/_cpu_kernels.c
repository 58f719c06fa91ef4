/* hookkit.backends._cpu_kernels: one pass over a float32 buffer for the monitoring statistics on the CPU.

   moments(x, near_zero, counts=None, lo=0, hi=0, max_abs=False)
       -> (sum, sum of squares, count of x <= near_zero, max |x| or None)
   max |x| (NaN when any x is) when asked; and, when ``counts`` (a writable int64 buffer of
   ``bins`` items) is given, adds torch.histc's counts of x over [lo, hi] into it.

   Why C: torch.histc on the CPU is a scalar loop (3-11 ns a value), and the vectorized numpy route
   (torch_stats.histc_host) still makes ~10 passes over memory plus a bincount. Here each 2048-value
   block is read once from memory, its bin slots computed with vector instructions, then counted into
   TABLES interleaved tables, dropped values spread over DROPS spare slots (no store-to-load stall on
   runs of one slot). The Python side keeps the
   numpy route for installs built without a C compiler.

   Exactness: the slot is histc's own float32 formula, (x - lo) * bins / (hi - lo) truncated, with
   x == hi (and anything rounding to bins) in the last bin; x outside [lo, hi] or NaN is dropped.
   Built with -ffp-contract=off and without fast-math so the compiler keeps those roundings. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 2048
#define TABLES 8
#define DROPS 16

typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));
typedef int32_t v4i __attribute__((vector_size(16)));

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define MULTIVERSION
#endif

typedef struct {
    double sum, ssq;
    int64_t count;
} Moments;

/* Sums in float64 lanes: the sum of squares of millions of values keeps ~1e-15 relative error. */
MULTIVERSION static void block_moments(const float *x, Py_ssize_t m, float near_zero, Moments *acc) {
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
    acc->sum += sum;
    acc->ssq += ssq;
    acc->count += count;
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

static PyObject *moments(PyObject *self, PyObject *args) {
    Py_buffer x, counts = {0};
    PyObject *counts_obj = Py_None;
    float near_zero, lo = 0, hi = 0;
    int want_max_abs = 0;
    if (!PyArg_ParseTuple(args, "y*f|Offp:moments", &x, &near_zero, &counts_obj, &lo, &hi, &want_max_abs))
        return NULL;
    Py_ssize_t bins = 0;
    int64_t *tables = NULL;
    if (counts_obj != Py_None) {
        if (PyObject_GetBuffer(counts_obj, &counts, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto fail;
        bins = counts.len / (Py_ssize_t)sizeof(int64_t);
        if (counts.len % (Py_ssize_t)sizeof(int64_t) || bins < 1 || bins > (1 << 24) || !(lo < hi)) {
            PyErr_Format(PyExc_ValueError, "moments: counts must be 1 to 2**24 int64 bins and lo < hi; got %zd bytes", counts.len);
            goto fail;
        }
        tables = PyMem_Calloc((size_t)TABLES * (size_t)(bins + 1 + DROPS), sizeof(int64_t));
        if (!tables) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    if (x.len % (Py_ssize_t)sizeof(float)) {
        PyErr_SetString(PyExc_ValueError, "moments: x must be a float32 buffer");
        goto fail;
    }
    const float *values = (const float *)x.buf;
    const Py_ssize_t n = x.len / (Py_ssize_t)sizeof(float);
    Moments acc = {0, 0, 0};
    uint32_t max_abs = 0;
    Py_BEGIN_ALLOW_THREADS;
    int32_t slot[BLOCK];
    for (Py_ssize_t i = 0; i < n; i += BLOCK) {
        const Py_ssize_t m = n - i < BLOCK ? n - i : BLOCK;
        block_moments(values + i, m, near_zero, &acc);
        if (want_max_abs)
            max_abs = block_max_abs_bits(values + i, m, max_abs);
        if (tables) {
            block_slots(values + i, m, lo, hi, (float)bins, slot);
            count_slots(slot, m, tables, bins + 1 + DROPS);
        }
    }
    Py_END_ALLOW_THREADS;
    if (tables) {
        int64_t *out = (int64_t *)counts.buf;
        for (int t = 0; t < TABLES; t++) {
            const int64_t *table = tables + t * (bins + 1 + DROPS);
            for (Py_ssize_t k = 0; k < bins; k++)
                out[k] += table[k];
            out[bins - 1] += table[bins]; /* position == bins: x == hi, histc's last bin */
        }
        PyMem_Free(tables);
        PyBuffer_Release(&counts);
    }
    PyBuffer_Release(&x);
    if (!want_max_abs)
        return Py_BuildValue("ddLO", acc.sum, acc.ssq, (long long)acc.count, Py_None);
    float largest;
    memcpy(&largest, &max_abs, sizeof largest);
    return Py_BuildValue("ddLd", acc.sum, acc.ssq, (long long)acc.count, (double)largest);
fail:
    PyMem_Free(tables);
    if (counts.obj)
        PyBuffer_Release(&counts);
    PyBuffer_Release(&x);
    return NULL;
}

static PyMethodDef methods[] = {
    {"moments", moments, METH_VARARGS,
     "moments(x, near_zero, counts=None, lo=0.0, hi=0.0, max_abs=False)\n"
     "    -> (sum, sum_of_squares, count <= near_zero, max |x| or None);\n"
     "adds torch.histc(x, len(counts), lo, hi) into the int64 buffer counts when given."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu_kernels", "One-pass CPU statistics for hookkit.", -1, methods};

PyMODINIT_FUNC PyInit__cpu_kernels(void) { return PyModule_Create(&module); }
