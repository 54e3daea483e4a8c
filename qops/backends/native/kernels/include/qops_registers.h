/* A value the compiler must keep in a vector register. */
#ifndef QOPS_REGISTERS_H
#define QOPS_REGISTERS_H

#define qops_in_register(value) __asm__("" : "+v"(value))

#endif /* QOPS_REGISTERS_H */
