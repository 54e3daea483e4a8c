/* Rounding half to even by the float magic number. */
#ifndef QOPS_ROUNDING_H
#define QOPS_ROUNDING_H

#define QOPS_ROUNDING_MAGIC 12582912.0f

#endif /* QOPS_ROUNDING_H */
