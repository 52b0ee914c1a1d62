// test_check.h - the plugin's ctest programs' one assertion: CHECK counts what passed and
// reports what failed (file, line, condition) without stopping, so that a program ends
// with "N passed, M failed" and exits non-zero on any failure.
#pragma once

#include <cstdio>

static int passed, failed;

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (cond) {                                                            \
      passed++;                                                            \
    } else {                                                               \
      std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      failed++;                                                            \
    }                                                                      \
  } while (0)
