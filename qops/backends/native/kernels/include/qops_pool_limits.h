/* qops_pool_limits.h: the pool's size limit, shared by the pool
   (qops_pool.h) and every module that cimports _qops_pool.pxd.  A header of
   its own so that those modules get the limit without the pool's code. */
#ifndef QOPS_POOL_LIMITS_H
#define QOPS_POOL_LIMITS_H

/* The most workers a job uses besides its caller (qops.threads.MAX_THREADS
   bounds what a call may ask for; beyond this the extra threads would
   only wait).  A job's slots are 0 .. QOPS_POOL_MAX_WORKERS. */
#define QOPS_POOL_MAX_WORKERS 255

#endif /* QOPS_POOL_LIMITS_H */
