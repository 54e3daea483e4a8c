/* Rounding half to even by the float magic number. */
#ifndef QOPS_ROUNDING_H
#define QOPS_ROUNDING_H

#define QOPS_ROUNDING_MAGIC 12582912.0f
/* The same for a float64 of magnitude below 2**51: 1.5 * 2**52. */
#define QOPS_DOUBLE_ROUNDING_MAGIC 6755399441055744.0

#endif /* QOPS_ROUNDING_H */
