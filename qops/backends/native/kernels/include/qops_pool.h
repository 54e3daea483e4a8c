/* qops_pool.h: the process's one thread pool (the C behind _qops_pool.pyx).

   Kept as a real header, not a string in the .pyx, so that it is compiled
   and checked as C (tests/backends/native/kernels/test_c_headers.py).
   Included by _qops_pool only: its statics (the workers, the job) must exist
   once per process.  Expects omp_get_max_threads() declared beforehand
   (<omp.h>, or the one-thread fallback of _openmp_helpers.pxd) and, like
   Python.h provides, POSIX declarations (clock_gettime, pthreads). */
#ifndef QOPS_POOL_H
#define QOPS_POOL_H

#include "qops_pool_limits.h"
#include <stddef.h>
#if defined(_OPENMP) && !defined(_WIN32)
#define QOPS_POOL_ENABLED 1
#else
#define QOPS_POOL_ENABLED 0
#endif

/* task(context, index, slot): slot 0 is the caller, 1 .. threads - 1
   the workers that joined, in the order they joined. */
typedef void (*qops_task)(void* context, ptrdiff_t index, int slot);

#if QOPS_POOL_ENABLED
#include <pthread.h>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QOPS_POOL_PAUSE() _mm_pause()
#else
#define QOPS_POOL_PAUSE() ((void)0)
#endif

#include <time.h>
/* How long an idle worker spins for the next job before it sleeps. */
#define QOPS_POOL_SPIN_NS 100000L

static long qops_pool_nanoseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long)now.tv_sec * 1000000000L + now.tv_nsec;
}

static pthread_mutex_t qops_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qops_pool_wake = PTHREAD_COND_INITIALIZER;
static int qops_pool_workers;           /* threads started */
static int qops_pool_busy;              /* a job is running */
static int qops_pool_open;              /* workers may join it */
static int qops_pool_wanted;            /* workers it may have */
static int qops_pool_joined;            /* workers that joined it */
static unsigned long qops_pool_generation;  /* jobs published */
static qops_task qops_pool_task;
static void* qops_pool_context;
static ptrdiff_t qops_pool_count;
static ptrdiff_t qops_pool_next;        /* atomic: next task to take */
static int qops_pool_active;            /* atomic: joined workers not yet done */
static int qops_pool_fork_handler;
static long qops_pool_jobs;             /* jobs published to the workers */
/* Holds taken (qops_pool_hold): while there is one, idle workers spin on
   instead of sleeping.  A model session takes one for its run: its steps
   come microseconds apart, some single-threaded NumPy between them, and a
   worker woken from its sleep joins a job late, when the caller has done
   much of it alone (docs/performance_notes.rst). */
static int qops_pool_holds;             /* atomic */
static long qops_pool_worker_tasks;     /* atomic: tasks the workers ran */

static void qops_pool_take(qops_task task, void* context, ptrdiff_t count, int slot) {
    for (;;) {
        ptrdiff_t index = __atomic_fetch_add(&qops_pool_next, 1, __ATOMIC_RELAXED);
        if (index >= count)
            return;
        task(context, index, slot);
        if (slot)
            __atomic_add_fetch(&qops_pool_worker_tasks, 1, __ATOMIC_RELAXED);
    }
}

static void* qops_pool_worker(void* unused) {
    /* Jobs are numbered from 1: a worker started for a job may join it. */
    unsigned long seen = 0;
    (void)unused;
    pthread_mutex_lock(&qops_pool_lock);
    for (;;) {
        qops_task task;
        void* context;
        ptrdiff_t count;
        int slot, spins;
        long start;
        if (!(qops_pool_open && qops_pool_generation != seen
              && qops_pool_joined < qops_pool_wanted)) {
            /* Spin a little for the next job, then sleep. */
            pthread_mutex_unlock(&qops_pool_lock);
            start = qops_pool_nanoseconds();
            for (spins = 1; __atomic_load_n(&qops_pool_generation, __ATOMIC_RELAXED) == seen;
                 spins++) {
                QOPS_POOL_PAUSE();
                if (spins % 64 == 0 && qops_pool_nanoseconds() - start > QOPS_POOL_SPIN_NS
                    && __atomic_load_n(&qops_pool_holds, __ATOMIC_RELAXED) <= 0)
                    break;
            }
            pthread_mutex_lock(&qops_pool_lock);
            while (!(qops_pool_open && qops_pool_generation != seen
                     && qops_pool_joined < qops_pool_wanted)) {
                if (qops_pool_generation != seen
                    && (!qops_pool_open || qops_pool_joined >= qops_pool_wanted)) {
                    /* A job closed before we came, or with all the workers
                       it wants: not ours to join. */
                    seen = qops_pool_generation;
                    if (__atomic_load_n(&qops_pool_holds, __ATOMIC_RELAXED) > 0)
                        break;  /* held: spin for the next one */
                }
                pthread_cond_wait(&qops_pool_wake, &qops_pool_lock);
            }
            if (!(qops_pool_open && qops_pool_generation != seen
                  && qops_pool_joined < qops_pool_wanted))
                continue;
        }
        seen = qops_pool_generation;
        slot = ++qops_pool_joined;
        __atomic_add_fetch(&qops_pool_active, 1, __ATOMIC_RELAXED);
        task = qops_pool_task;
        context = qops_pool_context;
        count = qops_pool_count;
        pthread_mutex_unlock(&qops_pool_lock);
        qops_pool_take(task, context, count, slot);
        /* Release: the caller sees this worker's outputs once it sees the count drop. */
        __atomic_sub_fetch(&qops_pool_active, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&qops_pool_lock);
    }
    return NULL;
}

static void qops_pool_after_fork(void) {
    /* The child has no workers: start afresh, counters included. */
    pthread_mutex_init(&qops_pool_lock, NULL);
    pthread_cond_init(&qops_pool_wake, NULL);
    qops_pool_workers = 0;
    qops_pool_busy = 0;
    qops_pool_open = 0;
    qops_pool_joined = 0;
    qops_pool_active = 0;
    qops_pool_jobs = 0;
    qops_pool_worker_tasks = 0;
    qops_pool_holds = 0;
}

/* Run task(context, i, slot) for i < count on up to `threads` threads. */
static void qops_run_tasks(qops_task task, void* context, ptrdiff_t count, int threads) {
    int wanted = threads - 1;
    ptrdiff_t i;
    if (wanted > count - 1)
        wanted = (int)(count - 1);
    if (wanted > QOPS_POOL_MAX_WORKERS)
        wanted = QOPS_POOL_MAX_WORKERS;
    if (wanted < 1)
        goto serial;
    pthread_mutex_lock(&qops_pool_lock);
    if (qops_pool_busy) {
        pthread_mutex_unlock(&qops_pool_lock);
        goto serial;
    }
    if (!qops_pool_fork_handler) {
        pthread_atfork(NULL, NULL, qops_pool_after_fork);
        qops_pool_fork_handler = 1;
    }
    while (qops_pool_workers < wanted) {
        pthread_t thread;
        pthread_attr_t attributes;
        int failed;
        pthread_attr_init(&attributes);
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        failed = pthread_create(&thread, &attributes, qops_pool_worker, NULL);
        pthread_attr_destroy(&attributes);
        if (failed)
            break;
        qops_pool_workers++;
    }
    if (wanted > qops_pool_workers)
        wanted = qops_pool_workers;
    qops_pool_busy = 1;
    qops_pool_jobs++;
    qops_pool_task = task;
    qops_pool_context = context;
    qops_pool_count = count;
    qops_pool_next = 0;
    qops_pool_active = 0;
    qops_pool_joined = 0;
    qops_pool_wanted = wanted;
    qops_pool_open = 1;
    __atomic_add_fetch(&qops_pool_generation, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&qops_pool_wake);
    pthread_mutex_unlock(&qops_pool_lock);

    qops_pool_take(task, context, count, 0);

    pthread_mutex_lock(&qops_pool_lock);
    qops_pool_open = 0;  /* every task is taken: nobody else joins */
    pthread_mutex_unlock(&qops_pool_lock);
    for (i = 0; __atomic_load_n(&qops_pool_active, __ATOMIC_ACQUIRE) != 0; i++) {
        if (i < 4096)
            QOPS_POOL_PAUSE();
        else
            sched_yield();  /* a worker holding a task may need this core */
    }
    pthread_mutex_lock(&qops_pool_lock);
    qops_pool_busy = 0;
    pthread_mutex_unlock(&qops_pool_lock);
    return;
serial:
    for (i = 0; i < count; i++)
        task(context, i, 0);
}
#else
static int qops_pool_workers;           /* never more than 0 here */
static long qops_pool_jobs;
static long qops_pool_worker_tasks;
static int qops_pool_holds;             /* nothing spins here */
static void qops_run_tasks(qops_task task, void* context, ptrdiff_t count, int threads) {
    ptrdiff_t i;
    (void)threads;
    for (i = 0; i < count; i++)
        task(context, i, 0);
}
#endif

/* Take (+1) or give back (-1) a hold on the idle workers' spinning;
   returns the holds then taken.  Never below none: a child after a fork
   starts with none, and gives back there the holds its parent's code took. */
int qops_pool_hold(int delta) {
    int held = __atomic_load_n(&qops_pool_holds, __ATOMIC_RELAXED), next;
    do {
        next = held + delta < 0 ? 0 : held + delta;
    } while (!__atomic_compare_exchange_n(&qops_pool_holds, &held, next, 0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return next;
}

/* The default thread count of calls that do not give one: set by
   qops.set_num_threads or by threadpoolctl (these two functions are the
   symbols its controller calls), else OpenMP's (OMP_NUM_THREADS, or the
   cores this process may use). */
static int qops_pool_configured;        /* 0: not set */

int qops_pool_get_num_threads(void) {
    int n = __atomic_load_n(&qops_pool_configured, __ATOMIC_RELAXED);
    return n > 0 ? n : (omp_get_max_threads() > 0 ? omp_get_max_threads() : 1);
}

/* The setting itself: n threads, or 0 to follow OpenMP.  threadpoolctl's
   controller (qops/backends/native/pool.py) reads and restores it. */
int qops_pool_configured_threads(void) {
    return __atomic_load_n(&qops_pool_configured, __ATOMIC_RELAXED);
}

void qops_pool_configure(int n) {
    __atomic_store_n(&qops_pool_configured, n > 0 ? n : 0, __ATOMIC_RELAXED);
}

/* A range cut into one home segment per thread (contiguous, whole
   grains, as even as can be), each a task of the job: its thread takes
   chunks from the segment's front, each half of what is left there (at
   least a grain), and when its own segment is done takes chunks from
   the others' fronts in turn, so the threads finish together however
   unevenly they run or join.  A thread's home is its slot's segment:
   the caller's is the first and with two threads the worker's the
   second, so call after call each thread works on the same part of the range
   and finds that part's data in its own cache: a matrix product's B
   columns stay in the L2 of the core that multiplies them (chunks handed
   out in turn send the columns from core to core).  A thread that
   never joins only leaves its segment to the others.  Chunks are whole
   grains (but a range's last): a caller's grain is a unit that should
   not be split. */
#define QOPS_RANGE_SEGMENTS (QOPS_POOL_MAX_WORKERS + 1)
typedef void (*qops_range_task)(void* context, ptrdiff_t start, ptrdiff_t stop, int slot);
typedef struct {
    qops_range_task task;
    void* context;
    ptrdiff_t grain;
    int segments;
    ptrdiff_t next[QOPS_RANGE_SEGMENTS];   /* atomic: each segment's front */
    ptrdiff_t end[QOPS_RANGE_SEGMENTS];
} qops_range;

/* Take a chunk [*start, *stop) from segment s; 0 when it is done. */
static int qops_range_take(qops_range* range, int s, ptrdiff_t* start, ptrdiff_t* stop) {
    ptrdiff_t front = __atomic_load_n(&range->next[s], __ATOMIC_RELAXED);
    for (;;) {
        ptrdiff_t left = range->end[s] - front, size;
        if (left <= 0)
            return 0;
        size = (left + 1) / 2;
        size = (size + range->grain - 1) / range->grain * range->grain;
        if (size > left)
            size = left;
        if (__atomic_compare_exchange_n(&range->next[s], &front, front + size, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            *start = front;
            *stop = front + size;
            return 1;
        }
    }
}

/* The task of a range's job: the thread's home segment (by its slot,
   so the caller's is always the first, even when a worker takes task 0
   before it), then the others in turn.  A thread that runs a second
   task finds every segment done. */
static void qops_range_segment(void* context, ptrdiff_t index, int slot) {
    qops_range* range = (qops_range*)context;
    ptrdiff_t start, stop;
    int turn, s;
    (void)index;
    for (turn = 0; turn < range->segments; turn++) {
        s = (slot + turn) % range->segments;
        while (qops_range_take(range, s, &start, &stop))
            range->task(range->context, start, stop, slot);
    }
}

static void qops_run_range(qops_range_task task, void* context, ptrdiff_t total,
                           ptrdiff_t grain, int threads) {
    qops_range range;
    ptrdiff_t grains, s;
    if (total <= 0)
        return;
    if (grain < 1)
        grain = 1;
    grains = (total + grain - 1) / grain;
    if (threads > grains)
        threads = (int)grains;
    if (threads > QOPS_RANGE_SEGMENTS)
        threads = QOPS_RANGE_SEGMENTS;
    if (threads <= 1) {
        task(context, 0, total, 0);
        return;
    }
    range.task = task;
    range.context = context;
    range.grain = grain;
    range.segments = threads;
    for (s = 0; s < threads; s++) {
        range.next[s] = grains * s / threads * grain;
        range.end[s] = s + 1 == threads ? total : grains * (s + 1) / threads * grain;
    }
    qops_run_tasks(qops_range_segment, &range, threads, threads);
}

#endif /* QOPS_POOL_H */
