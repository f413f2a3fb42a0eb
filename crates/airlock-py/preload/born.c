/*
 * libairlock_born.so: the preload library of a worker whose outputs are born in shared memory
 * (docs/adr/0044-outputs-born-in-shared-memory.md).
 *
 * torch takes every CPU storage from posix_memalign and gives it back with free, both through
 * the dynamic linker. Preloaded into a worker, this library stands in front of them: while
 * the worker's core has armed a thread (the one running a node), a block of at least
 * min_bytes asked for on that thread is leased from the call lane's pool by the core's birth
 * hook, so the node's kernel writes its output straight into shared memory and the reply sends
 * the region instead of copying it. Everything else goes to the next definition (glibc, or an
 * allocator the user preloaded after us).
 *
 * Why C and not a Rust crate: this code runs inside every free of the process, before the
 * allocator exists and after fork; it must not allocate, unwind or take a lock, and it must
 * link against glibc 2.28 like the wheel (zig cc does that in one command). The rules (the
 * pool, the budget, the holds) stay in Rust, behind the three hooks.
 *
 * Lock-free on every path: a free outside the born ranges (all but a few) costs one atomic
 * load and a short scan. Reentrancy (a hook that frees or aligns memory itself) and a child of
 * fork (whose copy of the core's locks may be held by a thread that no longer exists) both
 * take the plain path; a child leaks the born blocks it frees, which belong to its parent.
 *
 * numpy takes its arrays' data from malloc, which this library leaves alone (ADR 0045 says
 * why): it offers numpy a data allocator instead (NEP 49's PyDataMem_Handler), whose large
 * blocks on the armed thread come from posix_memalign above. The core installs it through
 * numpy's own C API once numpy is imported.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int (*memalign_fn)(void **, size_t, size_t);
typedef void (*free_fn)(void *);
typedef void *(*realloc_fn)(void *, size_t);
typedef void *(*malloc_fn)(size_t);
typedef size_t (*usable_fn)(void *);

/* The core's hooks. birth: a block of `size` bytes aligned to `align` in the pool, or NULL.
 * death: drops a born block, returning its length, or 0 if `p` was not born. length: a born
 * block's length, or 0. */
typedef void *(*birth_hook)(size_t size, size_t align);
typedef size_t (*death_hook)(void *p);
typedef size_t (*length_hook)(void *p);

#define RANGES 64

static _Atomic(memalign_fn) next_memalign;
static _Atomic(free_fn) next_free;
static _Atomic(realloc_fn) next_realloc;
static _Atomic(malloc_fn) next_malloc;
static _Atomic(usable_fn) next_usable;

static _Atomic(birth_hook) on_birth;
static _Atomic(death_hook) on_death;
static _Atomic(length_hook) on_length;
static atomic_size_t min_bytes;
/* pthread_self() of the armed thread, 0 when none. */
static atomic_uintptr_t armed;
static atomic_int forked;
/* Address ranges of segments that hold (or held) born blocks: [lo, hi). */
static atomic_uintptr_t range_lo[RANGES];
static atomic_uintptr_t range_hi[RANGES];
static atomic_int ranges;

static __thread int in_hook __attribute__((tls_model("initial-exec")));

#define NEXT(var, name)                                                                        \
    ({                                                                                         \
        __typeof__(atomic_load_explicit(&var, memory_order_relaxed)) f_ =                      \
            atomic_load_explicit(&var, memory_order_relaxed);                                  \
        if (!f_) {                                                                             \
            f_ = (__typeof__(f_))dlsym(RTLD_NEXT, name);                                       \
            atomic_store_explicit(&var, f_, memory_order_relaxed);                             \
        }                                                                                      \
        f_;                                                                                    \
    })

static int in_range(void *p) {
    uintptr_t a = (uintptr_t)p;
    int n = atomic_load_explicit(&ranges, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (a >= atomic_load_explicit(&range_lo[i], memory_order_relaxed) &&
            a < atomic_load_explicit(&range_hi[i], memory_order_relaxed))
            return 1;
    }
    return 0;
}

/* Whether `p` lies in a range that holds (or held) born blocks: only then is the core asked. */
static int may_be_born(void *p) {
    return p && atomic_load_explicit(&ranges, memory_order_relaxed) && in_range(p);
}

static void child_after_fork(void) {
    atomic_store(&forked, 1);
    atomic_store(&armed, 0);
}

__attribute__((constructor)) static void resolve(void) {
    NEXT(next_memalign, "posix_memalign");
    NEXT(next_free, "free");
    NEXT(next_realloc, "realloc");
    NEXT(next_malloc, "malloc");
    NEXT(next_usable, "malloc_usable_size");
    pthread_atfork(NULL, NULL, child_after_fork);
}

/* --- the core's side (found with dlsym by the worker's core) ------------------------------ */

__attribute__((visibility("default"))) int airlock_born_install(birth_hook birth, death_hook death,
                                                                length_hook length,
                                                                size_t min) {
    if (atomic_load(&forked))
        return 0;
    atomic_store(&min_bytes, min);
    atomic_store(&on_length, length);
    atomic_store(&on_death, death);
    atomic_store(&on_birth, birth);
    return 1;
}

/* Arms the calling thread (`on`), or disarms. */
__attribute__((visibility("default"))) void airlock_born_arm(int on) {
    atomic_store_explicit(&armed, on ? (uintptr_t)pthread_self() : 0, memory_order_relaxed);
}

/* Sets range `slot` (0 <= slot < RANGES) to [lo, hi). The core changes a range only while no
 * born block lies in it, so a concurrent free that reads a torn pair at worst asks the core
 * about an address that was not born. Returns 0 if `slot` is out of bounds. */
__attribute__((visibility("default"))) int airlock_born_set_range(int slot, uintptr_t lo,
                                                                  uintptr_t hi) {
    if (slot < 0 || slot >= RANGES)
        return 0;
    atomic_store_explicit(&range_hi[slot], 0, memory_order_relaxed);
    atomic_store_explicit(&range_lo[slot], lo, memory_order_relaxed);
    atomic_store_explicit(&range_hi[slot], hi, memory_order_release);
    int n = atomic_load(&ranges);
    while (slot >= n && !atomic_compare_exchange_weak(&ranges, &n, slot + 1)) {
    }
    return 1;
}

__attribute__((visibility("default"))) int airlock_born_ranges(void) { return RANGES; }

/* --- libc's side ---------------------------------------------------------------------------- */

int posix_memalign(void **out, size_t align, size_t size) {
    if (size >= atomic_load_explicit(&min_bytes, memory_order_relaxed) &&
        atomic_load_explicit(&armed, memory_order_relaxed) == (uintptr_t)pthread_self() &&
        !in_hook) {
        birth_hook birth = atomic_load_explicit(&on_birth, memory_order_acquire);
        if (birth && align <= 4096 && !atomic_load_explicit(&forked, memory_order_relaxed)) {
            in_hook = 1;
            void *p = birth(size, align);
            in_hook = 0;
            if (p) {
                *out = p;
                return 0;
            }
        }
    }
    return NEXT(next_memalign, "posix_memalign")(out, align, size);
}

void free(void *p) {
    if (may_be_born(p) && !in_hook) {
        if (atomic_load_explicit(&forked, memory_order_relaxed))
            return; /* the parent's block, in a child: left alone */
        death_hook death = atomic_load_explicit(&on_death, memory_order_acquire);
        if (death) {
            in_hook = 1;
            size_t len = death(p);
            in_hook = 0;
            if (len)
                return;
        }
    }
    NEXT(next_free, "free")(p);
}

static size_t born_length(void *p) {
    if (!may_be_born(p) || in_hook || atomic_load_explicit(&forked, memory_order_relaxed))
        return 0;
    length_hook length = atomic_load_explicit(&on_length, memory_order_acquire);
    if (!length)
        return 0;
    in_hook = 1;
    size_t len = length(p);
    in_hook = 0;
    return len;
}

void *realloc(void *p, size_t size) {
    size_t len = born_length(p);
    if (!len)
        return NEXT(next_realloc, "realloc")(p, size);
    /* A born block is never grown in place: moved to the heap (nothing in torch does this). */
    if (size == 0) {
        free(p);
        return NULL;
    }
    void *q = NEXT(next_malloc, "malloc")(size);
    if (q) {
        memcpy(q, p, len < size ? len : size);
        free(p);
    }
    return q;
}

size_t malloc_usable_size(void *p) {
    size_t len = born_length(p);
    return len ? len : NEXT(next_usable, "malloc_usable_size")(p);
}

/* --- numpy's data allocator (NEP 49, handler version 1) ---------------------------------------- */

typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} np_allocator;

typedef struct {
    char name[127];
    uint8_t version;
    np_allocator allocator;
} np_handler;

/* numpy's default allocator, which ours defers to for all but the blocks it lets be born. */
static np_allocator np_next;

/* A large array on the armed thread takes its block from posix_memalign (born, or glibc's when
 * refused); everything else, zeroed arrays included, from numpy's own allocator. Its free and
 * realloc reach glibc's free and realloc for such a block (numpy caches only blocks under 1 KiB),
 * and so the definitions above. */
static void *np_malloc(void *ctx, size_t size) {
    (void)ctx;
    if (size >= atomic_load_explicit(&min_bytes, memory_order_relaxed) &&
        atomic_load_explicit(&armed, memory_order_relaxed) == (uintptr_t)pthread_self()) {
        void *p = NULL;
        return posix_memalign(&p, 64, size) == 0 ? p : NULL;
    }
    return np_next.malloc(np_next.ctx, size);
}

static void *np_calloc(void *ctx, size_t nelem, size_t elsize) {
    (void)ctx;
    return np_next.calloc(np_next.ctx, nelem, elsize);
}

static void *np_realloc(void *ctx, void *ptr, size_t new_size) {
    (void)ctx;
    return np_next.realloc(np_next.ctx, ptr, new_size);
}

static void np_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    np_next.free(np_next.ctx, ptr, size);
}

static np_handler np_ours = {
    .name = "airlock_born",
    .version = 1,
    .allocator = {NULL, np_malloc, np_calloc, np_realloc, np_free},
};

/* Our handler for numpy, deferring to `next` (numpy's default allocator, copied once). */
__attribute__((visibility("default"))) np_handler *airlock_born_numpy(const np_allocator *next) {
    if (!np_next.malloc && next && next->malloc != np_malloc)
        np_next = *next;
    return np_next.malloc ? &np_ours : NULL;
}
