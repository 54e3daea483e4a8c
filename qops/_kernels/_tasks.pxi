# -- a task pool whose caller never waits for a thread that has not started -------
# An OpenMP parallel region ends at a barrier that every thread of the team
# must reach.  On a machine whose cores are busy with other processes a
# worker may wait milliseconds for a core, and the calling thread waits with
# it, although it has done all the work in the meantime: a 0.1 ms depthwise
# layer measured 10-20 ms a call that way.  Here the caller publishes a job
# of `count` independent tasks and takes tasks from a shared counter; the
# pool's threads join while the job is open and take tasks the same way.
# Once every task is taken the caller closes the job and waits only for the
# workers that joined (each finishes the task it holds); a worker that never
# got a core is not waited for.  Which thread runs a task never changes its
# result: tasks write disjoint outputs.
#
# Workers spin for the next job for 0.1 ms (back-to-back calls start at
# once) and then sleep on a condition variable.  A call finding the pool busy
# (another thread's call) runs its tasks itself.  Without OpenMP (the
# build's switch for threads) or pthreads every job runs on the caller.

cdef extern from *:
    """
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
    #define QOPS_POOL_MAX_WORKERS 255
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

    static void qops_pool_take(qops_task task, void* context, ptrdiff_t count, int slot) {
        for (;;) {
            ptrdiff_t index = __atomic_fetch_add(&qops_pool_next, 1, __ATOMIC_RELAXED);
            if (index >= count)
                return;
            task(context, index, slot);
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
                    if (spins % 64 == 0 && qops_pool_nanoseconds() - start > QOPS_POOL_SPIN_NS)
                        break;
                }
                pthread_mutex_lock(&qops_pool_lock);
                while (!(qops_pool_open && qops_pool_generation != seen
                         && qops_pool_joined < qops_pool_wanted)) {
                    if (qops_pool_generation != seen && !qops_pool_open)
                        seen = qops_pool_generation;  /* a job closed before we came */
                    pthread_cond_wait(&qops_pool_wake, &qops_pool_lock);
                }
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
        /* The child has no workers: start afresh. */
        pthread_mutex_init(&qops_pool_lock, NULL);
        pthread_cond_init(&qops_pool_wake, NULL);
        qops_pool_workers = 0;
        qops_pool_busy = 0;
        qops_pool_open = 0;
        qops_pool_joined = 0;
        qops_pool_active = 0;
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
    static void qops_run_tasks(qops_task task, void* context, ptrdiff_t count, int threads) {
        ptrdiff_t i;
        (void)threads;
        for (i = 0; i < count; i++)
            task(context, i, 0);
    }
    #endif
    """
    ctypedef void (*pool_task "qops_task")(void* context, Py_ssize_t index, int slot) noexcept nogil
    void run_tasks "qops_run_tasks"(pool_task task, void* context, Py_ssize_t count,
                                    int threads) nogil
