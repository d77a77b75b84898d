/* TfxlaLaunch: the native launch op (TF's _XlaRun role) for clusters compiled by tfxla_cluster.
 *
 * Stage: runtime. Built at first use by tfxla_cluster/runtime/native.py (gcc, TF's C API headers only,
 * linked against libtensorflow_framework.so.2) and loaded with ctypes; tfxla_init() registers the op
 * and its CPU kernel through TF's C op/kernel API.
 *
 *   TfxlaLaunch(args: Tin) -> results: Tout, attr key: string   (stateful: never folded or merged)
 *
 * The kernel finds its cluster by `key` (registered from Python with tfxla_register_cluster), builds
 * the signature of its inputs (rank and dims of each; the bytes of compile-time-constant inputs) and
 * looks it up in the cluster's entries. On a hit it fills the executable's buffer table (parameters:
 * TF's input buffers, zero-copy; outputs: buffers TF allocates; temps: the thread's arena) and calls the
 * llvmlite-compiled entry function directly — no Python, no GIL. On a miss (a new signature, or a
 * cluster Python must run: observers, fallbacks) it calls the Python callback, which compiles, runs,
 * writes the outputs through the same C API, and may add an entry for the next launch.
 *
 * Entries are immutable once published and never freed (the Python side keeps their executables
 * alive); the entry list is prepended under a mutex and read lock-free (acquire/release).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/kernels.h"
/* ops.h declares its handle types as bare structs (fine in C++); C needs the typedefs. */
typedef struct TF_DimensionHandle TF_DimensionHandle;
typedef struct TF_OpDefinitionBuilder TF_OpDefinitionBuilder;
typedef struct TF_ShapeHandle TF_ShapeHandle;
typedef struct TF_ShapeInferenceContext TF_ShapeInferenceContext;
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

#define OP_NAME "TfxlaLaunch"
#define STACK_KEY 256
#define STACK_TABLE 256
#define ALIGN 64

typedef void (*entry_fn)(uint64_t *table);
typedef int (*miss_fn)(int64_t cluster, void *ctx);

typedef struct Output {
    int64_t copy_of;    /* -1: HLO result written into `slot`; >= 0: an earlier launch output to copy;
                           <= -2: a copy of input -copy_of-2 (a variable's value the cluster left as is) */
    int64_t slot;
    int64_t nbytes;
    int64_t rank;
    int64_t *dims;
} Output;

typedef struct Entry {
    struct Entry *next;
    int64_t key_len;
    int64_t *key;
    entry_fn fn;
    int64_t n_slots;
    uint64_t *template_;   /* const slots hold their addresses; the rest is filled per call */
    int64_t n_params;
    int64_t *param_input;  /* launch input position of each parameter */
    int64_t *param_slot;
    int64_t n_outputs;
    Output *outputs;
    int64_t n_temps;
    int64_t *temp_slot;
    int64_t *temp_offset;
    int64_t arena_bytes;
} Entry;

typedef struct Cluster {
    char *key;
    int64_t id;
    int64_t n_inputs;
    int64_t n_const;        /* how many entries of `is_const` are set */
    uint8_t *is_const;      /* compile-time-constant inputs: their bytes are part of the signature */
    Entry *entries;         /* atomic head */
    int64_t executions;     /* native launches (atomic) */
    int python_only;        /* atomic: every launch goes to Python */
} Cluster;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static Cluster **clusters = NULL;
static int64_t n_clusters = 0, cap_clusters = 0;
static miss_fn miss_callback = NULL;
static int force_python = 0;   /* atomic: observers want every launch */

/* ------------------------------------------------------------------ registry (called from Python) */
int64_t tfxla_register_cluster(const char *key, int64_t n_inputs) {
    pthread_mutex_lock(&registry_lock);
    if (n_clusters == cap_clusters) {
        int64_t cap = cap_clusters ? cap_clusters * 2 : 64;
        Cluster **grown = realloc(clusters, cap * sizeof(Cluster *));
        if (!grown) { pthread_mutex_unlock(&registry_lock); return -1; }
        clusters = grown;
        cap_clusters = cap;
    }
    Cluster *c = calloc(1, sizeof(Cluster));
    c->key = strdup(key);
    c->id = n_clusters;
    c->n_inputs = n_inputs;
    c->is_const = calloc(n_inputs ? n_inputs : 1, 1);
    clusters[n_clusters++] = c;
    pthread_mutex_unlock(&registry_lock);
    return c->id;
}

static Cluster *cluster_by_id(int64_t id) {
    pthread_mutex_lock(&registry_lock);
    Cluster *c = (id >= 0 && id < n_clusters) ? clusters[id] : NULL;
    pthread_mutex_unlock(&registry_lock);
    return c;
}

void tfxla_set_miss_callback(miss_fn fn) { miss_callback = fn; }
void tfxla_set_force_python(int on) { __atomic_store_n(&force_python, on, __ATOMIC_RELEASE); }

void tfxla_set_python_only(int64_t id, int on) {
    Cluster *c = cluster_by_id(id);
    if (c) __atomic_store_n(&c->python_only, on, __ATOMIC_RELEASE);
}

int64_t tfxla_executions(int64_t id) {
    Cluster *c = cluster_by_id(id);
    return c ? __atomic_load_n(&c->executions, __ATOMIC_ACQUIRE) : 0;
}

/* Which inputs are compile-time constants: set once, before the first entry is added. */
void tfxla_set_const_inputs(int64_t id, const uint8_t *mask) {
    Cluster *c = cluster_by_id(id);
    if (!c) return;
    int64_t n = 0;
    for (int64_t i = 0; i < c->n_inputs; i++) n += (c->is_const[i] = mask[i] != 0);
    c->n_const = n;
}

static int64_t *copy_i64(const int64_t *src, int64_t n) {
    int64_t *dst = malloc((n ? n : 1) * sizeof(int64_t));
    if (n) memcpy(dst, src, n * sizeof(int64_t));
    return dst;
}

static int same_key(const Entry *e, const int64_t *key, int64_t len) {
    return e->key_len == len && memcmp(e->key, key, len * sizeof(int64_t)) == 0;
}

/* Add an entry described by `blob` (int64 words, laid out by native.py's _entry_blob):
 *   key_len, key[key_len], fn, n_slots, template[n_slots], n_params, (input, slot)*n_params,
 *   n_outputs, (copy_of, slot, nbytes, rank, dims[rank])*n_outputs, n_temps, (slot, offset)*n_temps,
 *   arena_bytes
 * Returns 1 when added, 0 when an entry with the same key exists already. */
int tfxla_add_entry(int64_t id, const int64_t *blob) {
    Cluster *c = cluster_by_id(id);
    if (!c) return -1;
    const int64_t *p = blob;
    Entry *e = calloc(1, sizeof(Entry));
    e->key_len = *p++;
    e->key = copy_i64(p, e->key_len); p += e->key_len;
    e->fn = (entry_fn)(uintptr_t)*p++;
    e->n_slots = *p++;
    e->template_ = (uint64_t *)copy_i64(p, e->n_slots); p += e->n_slots;
    e->n_params = *p++;
    e->param_input = malloc((e->n_params + 1) * sizeof(int64_t));
    e->param_slot = malloc((e->n_params + 1) * sizeof(int64_t));
    for (int64_t k = 0; k < e->n_params; k++) { e->param_input[k] = *p++; e->param_slot[k] = *p++; }
    e->n_outputs = *p++;
    e->outputs = calloc(e->n_outputs + 1, sizeof(Output));
    for (int64_t k = 0; k < e->n_outputs; k++) {
        Output *o = &e->outputs[k];
        o->copy_of = *p++; o->slot = *p++; o->nbytes = *p++; o->rank = *p++;
        o->dims = copy_i64(p, o->rank); p += o->rank;
    }
    e->n_temps = *p++;
    e->temp_slot = malloc((e->n_temps + 1) * sizeof(int64_t));
    e->temp_offset = malloc((e->n_temps + 1) * sizeof(int64_t));
    for (int64_t k = 0; k < e->n_temps; k++) { e->temp_slot[k] = *p++; e->temp_offset[k] = *p++; }
    e->arena_bytes = *p++;
    pthread_mutex_lock(&registry_lock);
    for (Entry *x = c->entries; x; x = x->next) {
        if (same_key(x, e->key, e->key_len)) {
            pthread_mutex_unlock(&registry_lock);
            return 0;   /* another thread published it first; `e` leaks (rare, small) */
        }
    }
    e->next = c->entries;
    __atomic_store_n(&c->entries, e, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&registry_lock);
    return 1;
}

/* ------------------------------------------------------------------ the op and its kernel */
typedef struct Kernel {
    Cluster *cluster;
} Kernel;

static void fail(TF_OpKernelContext *ctx, TF_Status *status, TF_Code code, const char *msg) {
    TF_SetStatus(status, code, msg);
    TF_OpKernelContext_Failure(ctx, status);
}

static void *kernel_create(TF_OpKernelConstruction *ctx) {
    TF_Status *status = TF_NewStatus();
    int32_t list_size = 0, total = 0;
    TF_OpKernelConstruction_GetAttrSize(ctx, "key", &list_size, &total, status);
    Kernel *k = NULL;
    if (TF_GetCode(status) == TF_OK) {
        char *key = calloc(total + 1, 1);
        TF_OpKernelConstruction_GetAttrString(ctx, "key", key, total, status);
        if (TF_GetCode(status) == TF_OK) {
            Cluster *found = NULL;
            pthread_mutex_lock(&registry_lock);
            for (int64_t i = 0; i < n_clusters && !found; i++)
                if (strcmp(clusters[i]->key, key) == 0) found = clusters[i];
            pthread_mutex_unlock(&registry_lock);
            if (found) {
                k = calloc(1, sizeof(Kernel));
                k->cluster = found;
            } else {
                TF_SetStatus(status, TF_FAILED_PRECONDITION,
                             "TfxlaLaunch: no cluster is registered under this key in this process "
                             "(launch nodes only run in the process that built them)");
            }
        }
        free(key);
    }
    if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
    TF_DeleteStatus(status);
    return k;
}

static void kernel_delete(void *kernel) { free(kernel); }

static __thread TF_Status *thread_status = NULL;

/* The temp arena, one per thread, kept across launches and grown when an entry needs more: a fresh
 * allocation per call is mmap'ed memory that every call page-faults in again (a fifth of a big training
 * step's CPU time). An entry never launches another on its thread, so one arena per thread suffices. */
typedef struct { void *ptr; size_t size; } Arena;
static pthread_key_t arena_key;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;

static void arena_free(void *a) {
    if (a) { free(((Arena *)a)->ptr); free(a); }
}

static void arena_key_init(void) { pthread_key_create(&arena_key, arena_free); }

static void *thread_arena(size_t bytes) {
    pthread_once(&arena_once, arena_key_init);
    Arena *a = pthread_getspecific(arena_key);
    if (!a) {
        a = calloc(1, sizeof(Arena));
        if (!a || pthread_setspecific(arena_key, a) != 0) { free(a); return NULL; }
    }
    if (a->size < bytes) {
        free(a->ptr);
        a->ptr = NULL;
        a->size = 0;
        if (posix_memalign(&a->ptr, ALIGN, bytes) != 0) { a->ptr = NULL; return NULL; }
        a->size = bytes;
    }
    return a->ptr;
}

/* The signature of the inputs into `key` (capacity `cap`); returns its length, or -1 if it needs more. */
static int64_t build_key(const Cluster *c, TF_Tensor **inputs, int64_t *key, int64_t cap) {
    int64_t n = 0;
    for (int64_t i = 0; i < c->n_inputs; i++) {
        int rank = TF_NumDims(inputs[i]);
        if (n + 1 + rank > cap) return -1;
        key[n++] = rank;
        for (int d = 0; d < rank; d++) key[n++] = TF_Dim(inputs[i], d);
        if (c->is_const[i]) {
            int64_t bytes = (int64_t)TF_TensorByteSize(inputs[i]);
            int64_t words = (bytes + 7) / 8;
            if (n + 1 + words > cap) return -1;
            key[n++] = bytes;
            if (words) key[n + words - 1] = 0;   /* zero the padding of the last word */
            if (bytes) memcpy(&key[n], TF_TensorData(inputs[i]), bytes);
            n += words;
        }
    }
    return n;
}

static int64_t key_capacity(const Cluster *c, TF_Tensor **inputs) {
    int64_t n = 0;
    for (int64_t i = 0; i < c->n_inputs; i++) {
        n += 1 + TF_NumDims(inputs[i]);
        if (c->is_const[i]) n += 1 + ((int64_t)TF_TensorByteSize(inputs[i]) + 7) / 8;
    }
    return n;
}

static void run_entry(const Entry *e, TF_OpKernelContext *ctx, TF_Tensor **inputs, TF_Status *status) {
    uint64_t stack_table[STACK_TABLE];
    uint64_t *table = e->n_slots <= STACK_TABLE ? stack_table : malloc(e->n_slots * sizeof(uint64_t));
    memcpy(table, e->template_, e->n_slots * sizeof(uint64_t));
    for (int64_t k = 0; k < e->n_params; k++)
        table[e->param_slot[k]] = (uint64_t)(uintptr_t)TF_TensorData(inputs[e->param_input[k]]);
    TF_Tensor *outs_stack[64];
    TF_Tensor **outs = e->n_outputs <= 64 ? outs_stack : calloc(e->n_outputs, sizeof(TF_Tensor *));
    int64_t made = 0;
    void *arena = NULL;
    for (; made < e->n_outputs; made++) {
        const Output *o = &e->outputs[made];
        outs[made] = TF_AllocateOutput(ctx, (int)made, TF_ExpectedOutputDataType(ctx, (int)made), o->dims,
                                       (int)o->rank, (size_t)o->nbytes, status);
        if (TF_GetCode(status) != TF_OK) {
            TF_OpKernelContext_Failure(ctx, status);
            goto done;
        }
        if (o->copy_of == -1) table[o->slot] = (uint64_t)(uintptr_t)TF_TensorData(outs[made]);
    }
    if (e->n_temps) {
        if (!(arena = thread_arena(e->arena_bytes ? (size_t)e->arena_bytes : ALIGN))) {
            fail(ctx, status, TF_RESOURCE_EXHAUSTED, "TfxlaLaunch: cannot allocate the temp arena");
            goto done;
        }
        for (int64_t k = 0; k < e->n_temps; k++)
            table[e->temp_slot[k]] = (uint64_t)(uintptr_t)arena + (uint64_t)e->temp_offset[k];
    }
    e->fn(table);
    for (int64_t k = 0; k < e->n_outputs; k++) {
        const Output *o = &e->outputs[k];
        if (o->copy_of >= 0 && o->nbytes)
            memcpy(TF_TensorData(outs[k]), TF_TensorData(outs[o->copy_of]), (size_t)o->nbytes);
        else if (o->copy_of <= -2 && o->nbytes)
            memcpy(TF_TensorData(outs[k]), TF_TensorData(inputs[-o->copy_of - 2]), (size_t)o->nbytes);
    }
done:
    for (int64_t k = 0; k < made; k++) TF_DeleteTensor(outs[k]);
    if (outs != outs_stack) free(outs);
    if (table != stack_table) free(table);
}

static void call_python(Cluster *c, TF_OpKernelContext *ctx, TF_Status *status) {
    if (!miss_callback) {
        fail(ctx, status, TF_FAILED_PRECONDITION, "TfxlaLaunch: the Python side is not initialised");
        return;
    }
    /* ctypes takes the GIL for the callback; it reports its own errors through the context. */
    miss_callback(c->id, ctx);
}

static void kernel_compute(void *kernel, TF_OpKernelContext *ctx) {
    Cluster *c = ((Kernel *)kernel)->cluster;
    if (!thread_status) thread_status = TF_NewStatus();
    TF_Status *status = thread_status;
    TF_SetStatus(status, TF_OK, "");
    if (__atomic_load_n(&force_python, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->python_only, __ATOMIC_ACQUIRE) ||
        !__atomic_load_n(&c->entries, __ATOMIC_ACQUIRE)) {
        call_python(c, ctx, status);
        return;
    }
    TF_Tensor *inputs_stack[64];
    TF_Tensor **inputs = c->n_inputs <= 64 ? inputs_stack : calloc(c->n_inputs, sizeof(TF_Tensor *));
    const Entry *hit = NULL;
    int64_t got = 0;
    for (; got < c->n_inputs; got++) {
        TF_GetInput(ctx, (int)got, &inputs[got], status);
        if (TF_GetCode(status) != TF_OK) break;
    }
    if (got == c->n_inputs) {
        int64_t key_stack[STACK_KEY];
        int64_t *key = key_stack;
        int64_t len = build_key(c, inputs, key, STACK_KEY);
        if (len < 0) {
            int64_t cap = key_capacity(c, inputs);
            key = malloc(cap * sizeof(int64_t));
            len = build_key(c, inputs, key, cap);
        }
        for (const Entry *e = __atomic_load_n(&c->entries, __ATOMIC_ACQUIRE); e; e = e->next) {
            if (same_key(e, key, len)) { hit = e; break; }
        }
        if (key != key_stack) free(key);
        if (hit) {
            run_entry(hit, ctx, inputs, status);
            __atomic_fetch_add(&c->executions, 1, __ATOMIC_RELAXED);
        }
    } else {
        TF_OpKernelContext_Failure(ctx, status);
    }
    for (int64_t i = 0; i < got; i++) TF_DeleteTensor(inputs[i]);
    if (inputs != inputs_stack) free(inputs);
    if (!hit && got == c->n_inputs) call_python(c, ctx, status);
}

static void shape_fn(TF_ShapeInferenceContext *ctx, TF_Status *status) {
    TF_ShapeInferenceContextSetUnknownShape(ctx, status);
}

/* Register the op and its CPU kernel; returns 0, or a TF_Code with `message` (capacity `cap`) filled. */
int tfxla_init(char *message, int cap) {
    TF_Status *status = TF_NewStatus();
    TF_OpDefinitionBuilder *op = TF_NewOpDefinitionBuilder(OP_NAME);
    TF_OpDefinitionBuilderAddAttr(op, "key: string");
    TF_OpDefinitionBuilderAddAttr(op, "Tin: list(type) >= 0");
    TF_OpDefinitionBuilderAddAttr(op, "Tout: list(type) >= 0");
    TF_OpDefinitionBuilderAddInput(op, "args: Tin");
    TF_OpDefinitionBuilderAddOutput(op, "results: Tout");
    TF_OpDefinitionBuilderSetIsStateful(op, 1);
    TF_OpDefinitionBuilderSetShapeInferenceFunction(op, shape_fn);
    TF_RegisterOpDefinition(op, status);
    if (TF_GetCode(status) == TF_OK) {
        TF_KernelBuilder *kb = TF_NewKernelBuilder(OP_NAME, "CPU", kernel_create, kernel_compute, kernel_delete);
        TF_RegisterKernelBuilder(OP_NAME, kb, status);
    }
    int code = TF_GetCode(status);
    if (code != TF_OK && message && cap > 0) {
        strncpy(message, TF_Message(status), cap - 1);
        message[cap - 1] = 0;
    }
    TF_DeleteStatus(status);
    return code;
}
