/*
 * What the fuzz targets need from the objects `make fuzz` leaves out.
 *
 * The fuzz binaries link the library's sources without its malloc entry
 * points (src/core/alloc.c, glibc.c, jemalloc.c): libFuzzer and the
 * sanitizers bring their own malloc, and two mallocs in one process do not
 * mix. The allocator's internals (arenas, thread state, statistics) still
 * work: they get their memory from mmap, not from malloc. The left-out
 * files define these too; weak, so a build that has them wins.
 */
#include <stdbool.h>

bool opt_check_sized __attribute__((weak));
/* Older trees: sized frees' page-map switch (defined in alloc.c). */
bool ma_sized_needs_lookup __attribute__((weak));
