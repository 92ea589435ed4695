/* threadpool.h — a persistent pool of worker threads with a parallel-for.
 *
 * Created once and reused for every attention call: a dispatch wakes the
 * workers (they spin briefly, then sleep on a futex), so per-call latency is
 * microseconds, not a thread creation. */
#ifndef KVQ_THREADPOOL_H
#define KVQ_THREADPOOL_H

#include "common/common.h"

/* Runs task (task_index, worker_index, arg); worker_index < n_threads. */
typedef void (*kvq_task_fn)(int task, int worker, void *arg);

/* kvq_threadpool_create/free are public (kvq.h). */
int kvq_threadpool_size(const kvq_threadpool *pool);

/* Runs fn for tasks 0..n_tasks-1 across the pool (the caller takes part)
 * and returns when all are done. Tasks are handed out dynamically in index
 * order. pool may be NULL: runs inline. Not reentrant: one parallel_for at a
 * time per pool. */
void kvq_threadpool_run(kvq_threadpool *pool, int n_tasks, kvq_task_fn fn, void *arg);

#endif
