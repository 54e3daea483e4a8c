# pack_groups_pair for the variants without a wider packer of their own:
# pack_groups on each of the two panels.


cdef void pack_groups_pair(const uint8_t* rows, Py_ssize_t ldb, Py_ssize_t count, uint8_t flip,
                           int8_t* first_target, int8_t* second_target,
                           int32_t* sums) noexcept nogil:
    pack_groups(rows, ldb, count, flip, first_target, sums)
    pack_groups(rows + NR, ldb, count, flip, second_target, sums + NR)
