/*
 * abi_test.c - exercises every function of folio.h from C, misuse included: null,
 * forged, closed and wrong-kind handles, NULL pointers, huge and overflowing lengths,
 * zero-length reads, reads at and past the end of file, a cache destroyed under open
 * files, and a handle closed while other threads read through it. Every byte read is
 * checked against the pattern the file was written with.
 *
 * Usage: abi_test DIR   (DIR: an empty, writable directory)
 * Prints one line per failed check and ends with "abi_test: N passed, M failed".
 * Compiled and run by tests/c_abi.rs against libfolio.a and libfolio.so.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "folio.h"

static int passed, failed;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (cond) {                                                            \
            passed++;                                                          \
        } else {                                                               \
            char msg_[256];                                                    \
            folio_last_error_message(msg_, sizeof msg_);                       \
            fprintf(stderr, "FAIL %s:%d: %s (last folio error: %s)\n",         \
                    __FILE__, __LINE__, #cond, msg_);                          \
            failed++;                                                          \
        }                                                                      \
    } while (0)

/* The byte at offset i of the pattern file: differs between pages and within them. */
static uint8_t pattern(uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
    return (uint8_t)((x >> 56) ^ (i >> 12));
}

static int matches_pattern(const uint8_t *buf, uint64_t offset, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (buf[i] != pattern(offset + i)) return 0;
    return 1;
}

static void write_pattern_file(const char *path, uint64_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    for (uint64_t i = 0; i < size; i++) fputc(pattern(i), f);
    if (fclose(f) != 0) { perror(path); exit(2); }
}

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 17;
}

/* 3 MiB + 1234: several large folios and a partial last page. */
#define FILE_BYTES ((uint64_t)(3u << 20) + 1234u)

static char path_pattern[4096], path_empty[4096], path_dir[4096], path_missing[4096];

static void test_options_and_create(void) {
    folio_cache_options o;
    folio_cache c = {0};

    CHECK(folio_cache_options_init(NULL) == -EFAULT);
    CHECK(folio_cache_options_init(&o) == 0);
    CHECK(o.size == sizeof o);
    CHECK(o.backend == FOLIO_BACKEND_AUTO);
    CHECK(o.capacity_bytes == FOLIO_CAPACITY_BYTES_DEFAULT);
    CHECK(o.readahead_max_bytes == FOLIO_READAHEAD_MAX_BYTES_DEFAULT);
    CHECK(o.eviction == FOLIO_EVICTION_S3FIFO);
    CHECK(o.prefault == 0);

    CHECK(folio_cache_create(&o, NULL) == -EFAULT);
    o.capacity_bytes = FOLIO_CAPACITY_BYTES_MIN - 1;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(c.id == 0); /* not written on failure */
    {
        char msg[256];
        size_t n = folio_last_error_message(msg, sizeof msg);
        CHECK(n > 0 && strstr(msg, "capacity") != NULL);
    }
    folio_cache_options_init(&o);
    o.backend = 99;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    folio_cache_options_init(&o);
    o.size = 8;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    folio_cache_options_init(&o);
    o.eviction = 7;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    folio_cache_options_init(&o);
    o.prefault = 2;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    folio_cache_options_init(&o);
    o.eviction = FOLIO_EVICTION_TWO_LIST_LRU;
    o.capacity_bytes = FOLIO_CAPACITY_BYTES_MIN;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    c.id = 0;
    /* A prefaulted cache works as any other. */
    folio_cache_options_init(&o);
    o.capacity_bytes = 4u << 20;
    o.prefault = 1;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    c.id = 0;

    /* NULL options: every default. */
    CHECK(folio_cache_create(NULL, &c) == 0);
    CHECK(c.id != 0);
    {
        folio_stats s;
        CHECK(folio_cache_stats(c, &s) == 0);
        CHECK(s.capacity_bytes == FOLIO_CAPACITY_BYTES_DEFAULT);
        CHECK(s.backend == FOLIO_BACKEND_IO_URING || s.backend == FOLIO_BACKEND_PREAD);
        CHECK(s.hits == 0 && s.misses == 0);
    }
    CHECK(folio_cache_destroy(c) == 0);
    CHECK(folio_cache_destroy(c) == -EBADF);
}

/* Reads the whole file in odd-sized pieces and at pseudo-random places. */
static void test_reads(folio_cache cache, folio_file f) {
    uint8_t *buf = malloc(FILE_BYTES + 4096);
    uint64_t len = 0, seed = 42;
    int64_t n;

    CHECK(folio_file_len(f, &len) == 0);
    CHECK(len == FILE_BYTES);
    CHECK(folio_file_len(f, NULL) == -EFAULT);

    /* Sequential, odd sizes. */
    {
        static const size_t sizes[] = {1, 4093, 4096, 65537, 8192, 333, 1 << 20};
        uint64_t off = 0;
        int ok = 1;
        for (size_t i = 0; off < FILE_BYTES; i++) {
            size_t want = sizes[i % (sizeof sizes / sizeof sizes[0])];
            n = folio_read(f, buf, want, off);
            size_t expect = (FILE_BYTES - off < want) ? (size_t)(FILE_BYTES - off) : want;
            if (n != (int64_t)expect || !matches_pattern(buf, off, expect)) {
                fprintf(stderr, "sequential read at %llu of %zu: got %lld\n",
                        (unsigned long long)off, want, (long long)n);
                ok = 0;
                break;
            }
            off += (uint64_t)n;
        }
        CHECK(ok);
    }
    /* Random offsets and lengths. */
    {
        int ok = 1;
        for (int i = 0; i < 2000 && ok; i++) {
            uint64_t off = lcg(&seed) % (FILE_BYTES + 100);
            size_t want = (size_t)(lcg(&seed) % 70000);
            size_t expect = off >= FILE_BYTES ? 0
                            : (FILE_BYTES - off < want ? (size_t)(FILE_BYTES - off) : want);
            n = folio_read(f, buf, want, off);
            if (n != (int64_t)expect || !matches_pattern(buf, off, expect)) {
                fprintf(stderr, "random read at %llu of %zu: got %lld, expected %zu\n",
                        (unsigned long long)off, want, (long long)n, expect);
                ok = 0;
            }
        }
        CHECK(ok);
    }
    /* The whole file in one read, with a length past its end. */
    memset(buf, 0, FILE_BYTES + 4096);
    n = folio_read(f, buf, FILE_BYTES + 4096, 0);
    CHECK(n == (int64_t)FILE_BYTES);
    CHECK(matches_pattern(buf, 0, FILE_BYTES));
    CHECK(buf[FILE_BYTES] == 0); /* nothing written past the end of file */

    /* End of file: short, then 0. */
    n = folio_read(f, buf, 100, FILE_BYTES - 10);
    CHECK(n == 10 && matches_pattern(buf, FILE_BYTES - 10, 10));
    CHECK(folio_read(f, buf, 100, FILE_BYTES) == 0);
    CHECK(folio_read(f, buf, 100, FILE_BYTES + 1) == 0);
    CHECK(folio_read(f, buf, 100, (uint64_t)1 << 62) == 0);

    /* Zero length, NULL buffers, huge and overflowing lengths. */
    CHECK(folio_read(f, buf, 0, 0) == 0);
    CHECK(folio_read(f, NULL, 0, 0) == 0);
    CHECK(folio_read(f, NULL, 10, 0) == -EFAULT);
    CHECK(folio_read(f, buf, SIZE_MAX, 0) == -EINVAL);
    CHECK(folio_read(f, buf, (size_t)INT64_MAX + 1, 0) == -EINVAL);
    CHECK(folio_read(f, buf, 100, UINT64_MAX - 10) == -EINVAL);

    /* Stats reflect the reads. */
    {
        folio_stats s;
        CHECK(folio_cache_stats(cache, NULL) == -EFAULT);
        CHECK(folio_cache_stats(cache, &s) == 0);
        CHECK(s.hits > 0);
        CHECK(s.misses > 0);
        CHECK(s.pages_inserted >= FILE_BYTES / 4096);
        CHECK(s.io_requests > 0 && s.io_bytes >= FILE_BYTES);
        CHECK(s.cached_bytes > 0 && s.cached_bytes <= s.capacity_bytes);
        CHECK(s.io_errors == 0);
        CHECK(s.eviction == FOLIO_EVICTION_S3FIFO);
    }
    free(buf);
}

/* folio_stats_format prints every field as name=value, like snprintf. */
static void test_stats_format(folio_cache cache) {
    folio_stats s;
    char line[4096], small[16];
    int64_t n;

    CHECK(folio_cache_stats(cache, &s) == 0);
    n = folio_stats_format(&s, line, sizeof line);
    CHECK(n > 0 && (size_t)n == strlen(line));
    {
        char want[64];
        snprintf(want, sizeof want, "hits=%llu ", (unsigned long long)s.hits);
        CHECK(strncmp(line, want, strlen(want)) == 0);
        snprintf(want, sizeof want, " pages_inserted=%llu ",
                 (unsigned long long)s.pages_inserted);
        CHECK(strstr(line, want) != NULL);
        snprintf(want, sizeof want, " capacity_bytes=%llu ",
                 (unsigned long long)s.capacity_bytes);
        CHECK(strstr(line, want) != NULL);
    }
    CHECK(strstr(line, " eviction=s3fifo") != NULL);
    CHECK(strstr(line, " backend=io_uring ") != NULL || strstr(line, " backend=pread ") != NULL);
    /* One word per uint64_t field, then backend and eviction. */
    {
        int words = 1;
        for (const char *p = line; *p; p++) words += *p == ' ';
        CHECK(words == (int)((sizeof s - 2 * sizeof(uint32_t)) / sizeof(uint64_t)) + 2);
    }
    CHECK(folio_stats_format(&s, NULL, 0) == n);
    CHECK(folio_stats_format(&s, small, sizeof small) == n);
    CHECK(strlen(small) == sizeof small - 1 && strncmp(small, line, sizeof small - 1) == 0);
    CHECK(folio_stats_format(NULL, line, sizeof line) == -EFAULT);
    CHECK(folio_stats_format(&s, NULL, 10) == -EFAULT);
}

static void test_readahead_and_advise(folio_file f) {
    folio_stats before, after;
    folio_cache c;
    folio_cache_options o;
    folio_file g;
    uint8_t buf[8192];

    /* A fresh cache, so the counters below are this test's own. */
    folio_cache_options_init(&o);
    o.capacity_bytes = 64u << 20;
    o.backend = FOLIO_BACKEND_PREAD;
    o.pread_threads = 2;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_open(c, path_pattern, &g) == 0);
    CHECK(folio_cache_stats(c, &before) == 0);
    CHECK(before.backend == FOLIO_BACKEND_PREAD);
    CHECK(before.capacity_bytes == 64u << 20);

    CHECK(folio_readahead(g, 0, FILE_BYTES) == 0);
    CHECK(folio_readahead(g, 0, 0) == 0);
    CHECK(folio_readahead(g, FILE_BYTES + 4096, 1 << 20) == 0); /* past EOF: nothing */
    CHECK(folio_readahead(g, UINT64_MAX - 10, 100) == -EINVAL);
    CHECK(folio_read(g, buf, sizeof buf, 1 << 20) == (int64_t)sizeof buf);
    CHECK(matches_pattern(buf, 1 << 20, sizeof buf));
    CHECK(folio_cache_stats(c, &after) == 0);
    CHECK(after.readahead_forced >= before.readahead_forced + 1);
    CHECK(after.readahead_pages >= FILE_BYTES / 4096);

    CHECK(folio_advise(g, 0, 0, FOLIO_ADVICE_NORMAL) == 0);
    CHECK(folio_advise(g, 0, 0, FOLIO_ADVICE_SEQUENTIAL) == 0);
    CHECK(folio_advise(g, 0, 0, FOLIO_ADVICE_RANDOM) == 0);
    CHECK(folio_advise(g, 0, FILE_BYTES, FOLIO_ADVICE_WILLNEED) == 0);
    CHECK(folio_advise(g, 0, 0, 5) == -EINVAL);
    CHECK(folio_advise(g, 0, 0, UINT32_MAX) == -EINVAL);
    CHECK(folio_advise(g, UINT64_MAX - 1, 2, FOLIO_ADVICE_WILLNEED) == -EINVAL);
    /* Reads wait for readahead still in flight, then DONTNEED drops whole pages. */
    CHECK(folio_read(g, buf, sizeof buf, FILE_BYTES - 8000) == 8000);
    CHECK(folio_advise(g, 0, FILE_BYTES, FOLIO_ADVICE_DONTNEED) == 0);
    CHECK(folio_cache_stats(c, &after) == 0);
    CHECK(after.invalidated_pages > 0);
    /* And the data reads back the same. */
    CHECK(folio_read(g, buf, sizeof buf, 12345) == (int64_t)sizeof buf);
    CHECK(matches_pattern(buf, 12345, sizeof buf));

    CHECK(folio_close(g) == 0);
    CHECK(folio_cache_destroy(c) == 0);

    /* The caller's handle of the shared test still works. */
    CHECK(folio_readahead(f, 0, 4096) == 0);
}

static void test_open_errors(folio_cache c) {
    folio_file f = {0};
    folio_cache null_cache = {0}, forged = {12345}, ones = {UINT64_MAX};

    CHECK(folio_open(null_cache, path_pattern, &f) == -EBADF);
    CHECK(folio_open(forged, path_pattern, &f) == -EBADF);
    CHECK(folio_open(ones, path_pattern, &f) == -EBADF);
    CHECK(folio_open(c, NULL, &f) == -EFAULT);
    CHECK(folio_open(c, path_pattern, NULL) == -EFAULT);
    CHECK(folio_open(c, path_missing, &f) == -ENOENT);
    {
        char msg[512];
        CHECK(folio_last_error_message(msg, sizeof msg) > 0);
        CHECK(strstr(msg, "folio_open") != NULL && strstr(msg, "missing") != NULL);
    }
    CHECK(folio_open(c, path_dir, &f) == -EISDIR);
    CHECK(folio_open(c, "/dev/null", &f) == -EINVAL);
    CHECK(f.id == 0);

    /* An empty file opens, has length 0 and reads 0. */
    CHECK(folio_open(c, path_empty, &f) == 0);
    {
        uint64_t len = 1;
        uint8_t b[16];
        CHECK(folio_file_len(f, &len) == 0 && len == 0);
        CHECK(folio_read(f, b, sizeof b, 0) == 0);
        CHECK(folio_readahead(f, 0, 1 << 20) == 0);
    }
    CHECK(folio_close(f) == 0);
}

/* A file grown and shrunk behind folio's back: folio_file_len keeps the old length until
   folio_file_refresh_len adopts the new one, for every handle of the file. */
static void test_refresh_len(folio_cache c) {
    char path[4200];
    folio_file f, g;
    uint64_t len = 0;
    uint8_t buf[8192];

    snprintf(path, sizeof path, "%s.grow", path_pattern);
    write_pattern_file(path, 10000);
    CHECK(folio_open(c, path, &f) == 0);
    CHECK(folio_open(c, path, &g) == 0);
    CHECK(folio_read(f, buf, sizeof buf, 4096) == 10000 - 4096); /* caches the end page */
    CHECK(matches_pattern(buf, 4096, 10000 - 4096));
    write_pattern_file(path, 30000);
    CHECK(folio_file_len(f, &len) == 0 && len == 10000);
    CHECK(folio_read(f, buf, sizeof buf, 10000) == 0);
    CHECK(folio_file_refresh_len(f, NULL) == -EFAULT);
    CHECK(folio_file_refresh_len(f, &len) == 0 && len == 30000);
    CHECK(folio_file_len(g, &len) == 0 && len == 30000);
    /* The page that held the old end is read again: its new bytes, not zeros. */
    CHECK(folio_read(g, buf, sizeof buf, 8000) == (int64_t)sizeof buf);
    CHECK(matches_pattern(buf, 8000, sizeof buf));
    CHECK(truncate(path, 5000) == 0);
    len = 0;
    CHECK(folio_file_refresh_len(g, &len) == 0 && len == 5000);
    CHECK(folio_read(f, buf, sizeof buf, 4096) == 5000 - 4096);
    CHECK(matches_pattern(buf, 4096, 5000 - 4096));
    CHECK(folio_read(f, buf, sizeof buf, 5000) == 0);
    CHECK(folio_close(f) == 0);
    CHECK(folio_file_refresh_len(f, &len) == -EBADF);
    CHECK(folio_close(g) == 0);
    unlink(path);
}

static void test_bad_file_handles(folio_cache c, folio_file live) {
    folio_file null_file = {0}, forged = {0xF100000000000001ull}, ones = {UINT64_MAX};
    folio_file as_file = {c.id};           /* a cache handle passed as a file */
    folio_cache as_cache = {live.id};      /* and a file handle as a cache */
    uint8_t b[16];
    uint64_t len;
    folio_stats s;
    folio_file all[] = {null_file, forged, ones, as_file};

    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        CHECK(folio_read(all[i], b, sizeof b, 0) == -EBADF);
        CHECK(folio_read(all[i], NULL, 0, 0) == -EBADF);
        CHECK(folio_readahead(all[i], 0, 10) == -EBADF);
        CHECK(folio_advise(all[i], 0, 10, FOLIO_ADVICE_RANDOM) == -EBADF);
        CHECK(folio_file_len(all[i], &len) == -EBADF);
        CHECK(folio_file_refresh_len(all[i], &len) == -EBADF);
        CHECK(folio_close(all[i]) == -EBADF);
    }
    CHECK(folio_cache_stats(as_cache, &s) == -EBADF);
    CHECK(folio_cache_destroy(as_cache) == -EBADF);
    CHECK(folio_open(as_cache, path_pattern, &null_file) == -EBADF);
    {
        folio_cache z = {0};
        CHECK(folio_cache_stats(z, &s) == -EBADF);
        CHECK(folio_cache_destroy(z) == -EBADF);
    }
}

static void test_close_and_reuse(folio_cache c) {
    folio_file a, b;
    uint8_t buf[4096];
    int fds_before = open_fds();

    CHECK(folio_open(c, path_pattern, &a) == 0);
    CHECK(open_fds() == fds_before + 1);
    CHECK(folio_read(a, buf, sizeof buf, 0) == (int64_t)sizeof buf);
    CHECK(folio_close(a) == 0);
    /* No call in flight: the descriptor is closed before folio_close returns. */
    CHECK(open_fds() == fds_before);
    CHECK(folio_close(a) == -EBADF);
    CHECK(folio_read(a, buf, sizeof buf, 0) == -EBADF);
    {
        char msg[256];
        folio_last_error_message(msg, sizeof msg);
        CHECK(strstr(msg, "not an open file handle") != NULL);
    }
    /* The slot is reissued under a new generation: the stale handle stays dead. */
    CHECK(folio_open(c, path_pattern, &b) == 0);
    CHECK(b.id != a.id);
    CHECK(folio_read(a, buf, sizeof buf, 0) == -EBADF);
    CHECK(folio_read(b, buf, sizeof buf, 4096) == (int64_t)sizeof buf);
    CHECK(matches_pattern(buf, 4096, sizeof buf));
    CHECK(folio_close(b) == 0);
}

static void test_destroy_cache_under_open_files(void) {
    folio_cache c;
    folio_file f;
    folio_stats s;
    uint8_t buf[10000];

    CHECK(folio_cache_create(NULL, &c) == 0);
    CHECK(folio_open(c, path_pattern, &f) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    CHECK(folio_cache_stats(c, &s) == -EBADF);
    {
        folio_file g = {0};
        CHECK(folio_open(c, path_pattern, &g) == -EBADF);
        CHECK(g.id == 0); /* untouched on failure */
    }
    CHECK(folio_read(f, buf, sizeof buf, 777777) == (int64_t)sizeof buf);
    CHECK(matches_pattern(buf, 777777, sizeof buf));
    CHECK(folio_close(f) == 0);
}

/* A cache smaller than the file: every byte still reads right, and pages are evicted
   and read again, under both eviction policies. */
static void test_eviction(uint32_t eviction) {
    folio_cache_options o;
    folio_cache c;
    folio_file f;
    folio_stats s;
    uint8_t *buf = malloc(100000);
    int ok = 1;

    folio_cache_options_init(&o);
    o.capacity_bytes = 1u << 20;
    o.eviction = eviction;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_open(c, path_pattern, &f) == 0);
    for (int pass = 0; pass < 2 && ok; pass++) {
        for (uint64_t off = 0; off < FILE_BYTES; off += 100000) {
            size_t expect = FILE_BYTES - off < 100000 ? (size_t)(FILE_BYTES - off) : 100000;
            if (folio_read(f, buf, 100000, off) != (int64_t)expect ||
                !matches_pattern(buf, off, expect)) {
                ok = 0;
                break;
            }
        }
    }
    CHECK(ok);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.evicted_pages > 0);
    CHECK(s.refaults > 0);
    CHECK(s.eviction == eviction);
    CHECK(s.cached_bytes <= s.capacity_bytes);
    CHECK(folio_close(f) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    free(buf);
}

/* Threads read through one handle while the main thread closes it. */
struct reader {
    folio_file f;
    uint64_t seed;
    int ok_reads, ebadf, wrong;
};

static void *reader_main(void *arg) {
    struct reader *r = arg;
    uint8_t buf[20000];
    for (int i = 0; i < 20000; i++) {
        uint64_t off = lcg(&r->seed) % FILE_BYTES;
        size_t want = (size_t)(lcg(&r->seed) % sizeof buf);
        size_t expect = FILE_BYTES - off < want ? (size_t)(FILE_BYTES - off) : want;
        int64_t n = folio_read(r->f, buf, want, off);
        if (n == -EBADF) {
            r->ebadf++;
            if (r->ebadf > 50) break;
        } else if (n == (int64_t)expect && matches_pattern(buf, off, expect)) {
            if (r->ebadf) r->wrong++; /* a closed handle never comes back */
            r->ok_reads++;
        } else {
            r->wrong++;
        }
    }
    return NULL;
}

static void test_close_while_reading(folio_cache c) {
    enum { THREADS = 4 };
    pthread_t t[THREADS];
    struct reader r[THREADS];
    folio_file f;
    int fds_before = open_fds();

    CHECK(folio_open(c, path_pattern, &f) == 0);
    for (int i = 0; i < THREADS; i++) {
        r[i] = (struct reader){.f = f, .seed = (uint64_t)i + 1};
        pthread_create(&t[i], NULL, reader_main, &r[i]);
    }
    usleep(20000);
    CHECK(folio_close(f) == 0);
    int ok = 0, wrong = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        ok += r[i].ok_reads;
        wrong += r[i].wrong;
    }
    CHECK(wrong == 0);
    CHECK(ok > 0);
    /* Every reader has returned: the next close lets the deferred drop of the first
       handle run, so both descriptors are gone after it. */
    {
        folio_file g;
        CHECK(folio_open(c, path_pattern, &g) == 0);
        CHECK(folio_close(g) == 0);
    }
    CHECK(open_fds() == fds_before);
}

static void *fresh_thread_message(void *arg) {
    *(size_t *)arg = folio_last_error_message(NULL, 0);
    return NULL;
}

static void test_last_error_message(void) {
    folio_file none = {0};
    char small[8];
    size_t full, n;
    pthread_t t;
    size_t fresh = 99;

    CHECK(folio_close(none) == -EBADF);
    full = folio_last_error_message(NULL, 0);
    CHECK(full > sizeof small);
    n = folio_last_error_message(small, sizeof small);
    CHECK(n == full);
    CHECK(small[sizeof small - 1] == '\0' && strlen(small) == sizeof small - 1);
    CHECK(strncmp(small, "folio_c", 7) == 0);
    /* Successes leave it alone. */
    CHECK(folio_cache_options_init(&(folio_cache_options){0}) == 0);
    CHECK(folio_last_error_message(NULL, 0) == full);
    /* Per thread: a new thread has none. */
    pthread_create(&t, NULL, fresh_thread_message, &fresh);
    pthread_join(t, NULL);
    CHECK(fresh == 0);
}

int main(int argc, char **argv) {
    folio_cache_options o;
    folio_cache c;
    folio_file f;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(path_pattern, sizeof path_pattern, "%s/pattern.bin", argv[1]);
    snprintf(path_empty, sizeof path_empty, "%s/empty.bin", argv[1]);
    snprintf(path_dir, sizeof path_dir, "%s/subdir", argv[1]);
    snprintf(path_missing, sizeof path_missing, "%s/missing.bin", argv[1]);
    write_pattern_file(path_pattern, FILE_BYTES);
    write_pattern_file(path_empty, 0);
    if (mkdir(path_dir, 0755) != 0 && errno != EEXIST) { perror(path_dir); return 2; }

    test_options_and_create();
    test_last_error_message();

    folio_cache_options_init(&o);
    o.capacity_bytes = 32u << 20;
    CHECK(folio_cache_create(&o, &c) == 0);
    test_open_errors(c);
    CHECK(folio_open(c, path_pattern, &f) == 0);
    test_reads(c, f);
    test_stats_format(c);
    test_readahead_and_advise(f);
    test_bad_file_handles(c, f);
    test_refresh_len(c);
    test_close_and_reuse(c);
    test_close_while_reading(c);
    CHECK(folio_close(f) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    test_destroy_cache_under_open_files();
    test_eviction(FOLIO_EVICTION_S3FIFO);
    test_eviction(FOLIO_EVICTION_TWO_LIST_LRU);

    printf("abi_test: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
