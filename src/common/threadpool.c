/* threadpool.c — persistent workers, dispatch by generation counter.
 *
 * The caller publishes a job and bumps `generation`; workers spin on it for a
 * short while (decode steps come back to back) and then sleep on a futex.
 * Tasks are claimed with an atomic counter; the caller works too and then
 * waits for `pending` to reach zero: it spins a while, then sleeps on a futex
 * the last worker wakes. Without the sleep, a worker descheduled by another
 * process on a busy machine left the caller spinning for whole time slices
 * (measured: decode at -t 2 on a loaded 2-core box 8x slower than -t 1). */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/threadpool.h"

/* ~100 us of spinning at 4 GHz before a futex sleep. Decode attention
 * leaves ~15 us between dispatches (query prep, the serial merge); with
 * 20000 the worker slept through every one and its wake-up cost more than
 * its share of the work (turbo3 attention at depth 4096, 2 threads: 2.6 ->
 * 1.6 ms a step; kvq bench tg128 at depth 4096, f16: 82-89 -> 108-112 t/s). */
#define SPIN_ITERS 400000

struct kvq_threadpool {
    int n_threads;
    pthread_t *threads;          /* (n_threads - 1) */
    _Atomic uint32_t generation; /* futex word: bumped per job and on shutdown */
    _Atomic int next_task;
    _Atomic uint32_t pending;    /* futex word: workers still inside the current job */
    _Atomic int caller_waiting;  /* the caller sleeps on pending: the last worker wakes it */
    _Atomic int stop;
    _Atomic int sleepers;        /* workers inside futex_wait: skip the wake syscall when 0 */
    int n_tasks;
    kvq_task_fn fn;
    void *arg;
};

typedef struct {
    kvq_threadpool *pool;
    int index;
} worker_arg;

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_one(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* No PAUSE: under a hypervisor, pause-loop exiting deschedules a spinning
 * vCPU (measured here: 2 threads 48.9 ms/step with PAUSE, 25.4 without). */
static inline void cpu_relax(void) { __asm__ volatile("" ::: "memory"); }

static void drain(kvq_threadpool *p, int worker) {
    for (;;) {
        const int t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (t >= p->n_tasks) return;
        p->fn(t, worker, p->arg);
    }
}

static void *worker_main(void *varg) {
    worker_arg *wa = varg;
    kvq_threadpool *p = wa->pool;
    const int index = wa->index;
    free(wa);
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ITERS) cpu_relax();
            else {
                atomic_fetch_add(&p->sleepers, 1);
                futex_wait(&p->generation, seen);
                atomic_fetch_sub(&p->sleepers, 1);
            }
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        drain(p, index);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waiting)) futex_wake_one(&p->pending);
    }
}

kvq_status kvq_threadpool_create(int n_threads, kvq_threadpool **out) {
    KVQ_RETURN_IF(!out, KVQ_ERR_INVALID_ARG, "kvq_threadpool_create: out is NULL");
    *out = NULL;
    KVQ_RETURN_IF(n_threads < 1 || n_threads > 1024, KVQ_ERR_INVALID_ARG,
                  "kvq_threadpool_create: %d threads is not in [1, 1024]", n_threads);
    kvq_threadpool *p = calloc(1, sizeof *p);
    KVQ_RETURN_IF(!p, KVQ_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            free(p);
            return kvq_fail(KVQ_ERR_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->pool = p;
            wa->index = i;
        }
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i; /* join only those started */
            kvq_threadpool_free(p);
            return kvq_fail(KVQ_ERR_NOMEM, "thread pool: could not start thread %d of %d", i, n_threads);
        }
    }
    *out = p;
    return KVQ_OK;
}

void kvq_threadpool_free(kvq_threadpool *p) {
    if (!p) return;
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_acq_rel);
    futex_wake_all(&p->generation);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    free(p);
}

int kvq_threadpool_size(const kvq_threadpool *p) { return p ? p->n_threads : 1; }

void kvq_threadpool_run(kvq_threadpool *p, int n_tasks, kvq_task_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(t, 0, arg);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, (uint32_t)(p->n_threads - 1), memory_order_relaxed);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) futex_wake_all(&p->generation);
    drain(p, 0);
    int spins = 0;
    uint32_t left;
    while ((left = atomic_load_explicit(&p->pending, memory_order_acquire)) > 0) {
        if (++spins < SPIN_ITERS) {
            cpu_relax();
            continue;
        }
        /* Announce the sleep, then re-read: a worker that finished in between
         * either saw the flag (and wakes us) or left pending at 0 (no sleep). */
        atomic_store(&p->caller_waiting, 1);
        left = atomic_load(&p->pending);
        if (left > 0) futex_wait(&p->pending, left);
        atomic_store(&p->caller_waiting, 0);
    }
}
