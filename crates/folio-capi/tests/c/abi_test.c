/*
 * abi_test.c - exercises every function of folio.h from C, misuse included: null,
 * forged, closed and wrong-kind handles, NULL pointers, huge and overflowing lengths,
 * zero-length reads, reads at and past the end of file, a cache destroyed under open
 * files, and a handle closed while other threads read through it. Every byte read is
 * checked against the pattern the file was written with. The write side: open flags and
 * their misuse, writes through read-only handles, writes of every shape read back
 * through every handle and on the disk after each kind of sync, set_len both ways,
 * writeback without a sync, the dirty options' effect, readers racing a writer, and
 * folio_remove_file (a closed file's dirty pages dropped; open handles and other links kept).
 * The capacity: the machine-sized defaults, the policy's and the maximum's checks, and
 * folio_cache_set_capacity up and down (memory given back, dirty pages written back
 * rather than dropped, every byte still right). Persistence, on by default: the segment
 * file and the keeper while the cache lives, neither after it, none with persistent = 0,
 * the options' misuse, and a process SIGKILLed after unsynced writes whose keeper writes
 * them to the file. Adoption: a named segment outlives its cache and the next cache of
 * that name adopts it (folio_cache_adoption: pages kept, read with no I/O, the right
 * bytes; a file changed meanwhile dropped), a name in use refused, and the naming
 * options' misuse. A domain: two handles of one file share its pages, a cache created
 * again in the domain finds them, a FOLIO_OPEN_PRIVATE handle reads the cache's own pages,
 * and bad domain names are refused.
 *
 * Usage: abi_test DIR   (DIR: an empty, writable directory)
 * Prints one line per failed check and ends with "abi_test: N passed, M failed".
 * Compiled and run by tests/c_abi.rs against libfolio.a and libfolio.so.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "folio.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

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

/* The defaults, but a capacity only folio_cache_set_capacity moves (FOLIO_CAPACITY_FIXED):
   for the tests that count evictions, dirty pages and writebacks, which the default
   policy's shrinks would disturb whenever the machine (any process on it) stalls for
   memory. */
static void options_init_fixed(folio_cache_options *o) {
    folio_cache_options_init(o);
    o->capacity_policy = FOLIO_CAPACITY_FIXED;
}

/* The machine's memory (MemTotal of /proc/meminfo), in bytes; 0 if unreadable. */
static uint64_t mem_total_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kib = 0;
    char line[256];
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1) break;
    fclose(f);
    return (uint64_t)kib << 10;
}

static void test_options_and_create(void) {
    folio_cache_options o;
    folio_cache c = {0};

    CHECK(folio_cache_options_init(NULL) == -EFAULT);
    CHECK(folio_cache_options_init(&o) == 0);
    CHECK(o.size == sizeof o);
    CHECK(o.backend == FOLIO_BACKEND_AUTO);
    CHECK(o.capacity_bytes == 0); /* what the machine affords */
    CHECK(o.capacity_policy == FOLIO_CAPACITY_FOLLOW_MACHINE);
    CHECK(o.capacity_max_bytes == 0);
    CHECK(o.readahead_max_bytes == FOLIO_READAHEAD_MAX_BYTES_DEFAULT);
    CHECK(o.eviction == FOLIO_EVICTION_S3FIFO);
    CHECK(o.prefault == 0);
    CHECK(o.arena_pages == FOLIO_ARENA_PAGES_AUTO);
    CHECK(o.dirty_expire_ms == FOLIO_DIRTY_EXPIRE_MS_DEFAULT);
    CHECK(o.dirty_limit_bytes == 0 && o.dirty_background_bytes == 0);
    CHECK(o.write_behind_bytes == FOLIO_WRITE_BEHIND_BYTES_DEFAULT);

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
    o.arena_pages = 3;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    {
        char msg[256];
        folio_last_error_message(msg, sizeof msg);
        CHECK(strstr(msg, "arena_pages") != NULL);
    }
    /* Dirty thresholds: a limit below a page or above the capacity, a background
       threshold above the limit (set, or the default one). */
    folio_cache_options_init(&o);
    o.capacity_bytes = 4u << 20;
    o.dirty_limit_bytes = 4095;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    o.dirty_limit_bytes = (4u << 20) + 4096;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    o.dirty_limit_bytes = 1u << 20;
    o.dirty_background_bytes = (1u << 20) + 1;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    {
        char msg[256];
        folio_last_error_message(msg, sizeof msg);
        CHECK(strstr(msg, "dirty_background_bytes") != NULL);
    }
    o.dirty_limit_bytes = 0; /* the default: 20% of 4 MiB */
    o.dirty_background_bytes = 1u << 20;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(c.id == 0);
    o.dirty_background_bytes = 256u << 10;
    o.dirty_expire_ms = UINT32_MAX;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    c.id = 0;
    folio_cache_options_init(&o);
    o.capacity_bytes = 4u << 20;
    o.dirty_limit_bytes = 4u << 20; /* the whole capacity, and a single page: both fine */
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    o.dirty_limit_bytes = 4096;
    o.dirty_background_bytes = 4096;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    c.id = 0;
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
    /* So do caches on 4 KiB and on huge pages. */
    for (uint32_t pages = FOLIO_ARENA_PAGES_SMALL; pages <= FOLIO_ARENA_PAGES_HUGE; pages++) {
        folio_cache_options_init(&o);
        o.capacity_bytes = 4u << 20;
        o.arena_pages = pages;
        CHECK(folio_cache_create(&o, &c) == 0);
        CHECK(folio_cache_destroy(c) == 0);
        c.id = 0;
    }

    /* NULL options: every default; the capacity is what the machine affords, at most
       its memory. */
    CHECK(folio_cache_create(NULL, &c) == 0);
    CHECK(c.id != 0);
    {
        folio_stats s;
        uint64_t total = mem_total_bytes();
        CHECK(folio_cache_stats(c, &s) == 0);
        CHECK(s.capacity_bytes >= FOLIO_CAPACITY_BYTES_MIN);
        CHECK(s.capacity_bytes <= s.capacity_max_bytes);
        CHECK(total == 0 || s.capacity_max_bytes <= total);
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
/* folio_read_many: a batch with valid, empty, past-the-end and bad ranges; each range
   gets its own result, the valid ones the file's bytes. */
static void test_read_many(folio_file f) {
    uint8_t *a = malloc(8192), *b = malloc(100), *c = malloc(4096);
    folio_read_req reqs[6] = {
        {a, 8192, 3 * 4096 + 5, 0},        /* unaligned, three pages */
        {b, 100, FILE_BYTES - 40, 0},      /* short at the end */
        {c, 0, 0, 0},                      /* empty */
        {NULL, 10, 0, 0},                  /* NULL buffer */
        {c, 4096, UINT64_MAX - 5, 0},      /* overflow */
        {c, 4096, 700 * 4096, 0},
    };
    CHECK(folio_read_many(f, reqs, 6) == 0);
    CHECK(reqs[0].result == 8192 && matches_pattern(a, 3 * 4096 + 5, 8192));
    CHECK(reqs[1].result == 40 && matches_pattern(b, FILE_BYTES - 40, 40));
    CHECK(reqs[2].result == 0);
    CHECK(reqs[3].result == -EFAULT);
    CHECK(reqs[4].result == -EINVAL);
    CHECK(reqs[5].result == 4096 && matches_pattern(c, 700 * 4096, 4096));
    /* One read's hint. */
    CHECK(folio_read_hint(f, a, 8192, 12345, FOLIO_READ_NOREUSE) == 8192 && matches_pattern(a, 12345, 8192));
    CHECK(folio_read_hint(f, a, 100, 7, FOLIO_READ_NORMAL) == 100 && matches_pattern(a, 7, 100));
    CHECK(folio_read_hint(f, a, 100, 7, 9) == -EINVAL);
    CHECK(folio_read_many(f, NULL, 0) == 0);
    CHECK(folio_read_many(f, NULL, 3) == -EFAULT);
    {
        folio_file z = {0};
        CHECK(folio_read_many(z, reqs, 1) == -EBADF);
    }
    free(a);
    free(b);
    free(c);
}

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
    options_init_fixed(&o);
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
    CHECK(folio_advise(g, 0, 0, FOLIO_ADVICE_NOREUSE) == 0);
    CHECK(folio_read(g, buf, sizeof buf, 3 * 8192) == (int64_t)sizeof buf);
    CHECK(matches_pattern(buf, 3 * 8192, sizeof buf));
    CHECK(folio_advise(g, 0, 0, FOLIO_ADVICE_NORMAL) == 0);
    CHECK(folio_advise(g, 0, 0, 6) == -EINVAL);
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
        {
            folio_handle_stats hs;
            CHECK(folio_file_stats(all[i], &hs) == -EBADF);
        }
        CHECK(folio_write(all[i], b, sizeof b, 0) == -EBADF);
        CHECK(folio_write(all[i], NULL, 0, 0) == -EBADF);
        CHECK(folio_set_len(all[i], 0) == -EBADF);
        CHECK(folio_sync(all[i], FOLIO_SYNC_DATA, 0, 0) == -EBADF);
        CHECK(folio_sync(all[i], 0, 0, 0) == -EBADF); /* the handle is checked first */
        CHECK(folio_writeback(all[i], 0, 10) == -EBADF);
        CHECK(folio_close(all[i]) == -EBADF);
    }
    CHECK(folio_cache_stats(as_cache, &s) == -EBADF);
    CHECK(folio_cache_destroy(as_cache) == -EBADF);
    CHECK(folio_open(as_cache, path_pattern, &null_file) == -EBADF);
    CHECK(folio_open2(as_cache, path_pattern, FOLIO_OPEN_WRITE, &null_file) == -EBADF);
    CHECK(folio_cache_sync_all(as_cache) == -EBADF);
    {
        folio_cache z = {0};
        CHECK(folio_cache_stats(z, &s) == -EBADF);
        CHECK(folio_cache_destroy(z) == -EBADF);
        CHECK(folio_cache_sync_all(z) == -EBADF);
        CHECK(folio_open2(z, path_pattern, 0, &null_file) == -EBADF);
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

    options_init_fixed(&o);
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
    _Atomic int ok_reads; /* read by the main thread while the reader runs */
    int ebadf, wrong;
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
    /* The close must land among reads: wait for the first (up to 10 s: a loaded machine
       may not run the readers for a while), then let them go on a little. */
    for (int waited = 0; waited < 10000; waited++) {
        int any = 0;
        for (int i = 0; i < THREADS; i++) any += atomic_load(&r[i].ok_reads);
        if (any > 0) break;
        usleep(1000);
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

/* ---- Writes ------------------------------------------------------------------------ */

/* The byte a write test puts at offset i in round `round`: differs from `pattern`. */
static uint8_t written(uint64_t i, unsigned round) {
    return (uint8_t)(pattern(i) ^ (0x5Au + round * 0x3Bu));
}

/* Reads `n` bytes of the file at `path` at `offset` past folio (plain pread), into buf;
   returns the count. What is on the device (or in the kernel's page cache). */
static int64_t read_disk(const char *path, void *buf, size_t n, uint64_t offset) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -errno;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(offset + got));
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    return (int64_t)got;
}

/* Whether the first `n` bytes of the file at `path` on the device are round `round`'s
   written bytes (read past folio). */
static int disk_holds_written(const char *path, size_t n, unsigned round) {
    uint8_t *buf = malloc(n);
    int same = buf != NULL && read_disk(path, buf, n, 0) == (int64_t)n;
    for (uint64_t i = 0; same && i < n; i++) same = buf[i] == written(i, round);
    free(buf);
    return same;
}

static uint64_t disk_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : UINT64_MAX;
}

/* Copies the pattern file to `path` (a file to overwrite). */
static void copy_pattern_file(const char *path, uint64_t size) { write_pattern_file(path, size); }

/* Whether process `pid` runs: /proc has it and it is not a zombie. */
static int process_alive(int64_t pid) {
    char path[64], stat[512];
    FILE *f;
    size_t n;
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    f = fopen(path, "r");
    if (!f) return 0;
    n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    return strstr(stat, ") Z ") == NULL;
}

/* The parent pid of `pid` (from /proc), or -1. */
static int64_t parent_of(int64_t pid) {
    char path[64], stat[512];
    long long ppid = -1;
    FILE *f;
    size_t n;
    char *close_paren;
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    f = fopen(path, "r");
    if (!f) return -1;
    n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    close_paren = strrchr(stat, ')');
    if (!close_paren || sscanf(close_paren, ") %*c %lld", &ppid) != 1) return -1;
    return ppid;
}

/* Waits up to 30 s until the keeper `pid` has exited and `segment` is gone; returns
   whether both happened. */
static int wait_keeper_done(int64_t pid, const char *segment) {
    struct stat st;
    for (int i = 0; i < 3000; i++) {
        if (!process_alive(pid) && lstat(segment, &st) != 0 && errno == ENOENT) return 1;
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return 0;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

/* Whether this thread's last folio error mentions `what`. */
static int last_error_has(const char *what) {
    char msg[512];
    folio_last_error_message(msg, sizeof msg);
    return strstr(msg, what) != NULL;
}

/* The default cache is persistent: its segment file (a regular file of this user's, mode
   0600) and its keeper (a live process, not our child) exist while it lives, and neither
   after folio_cache_destroy; persistent = 0 has neither; the options' misuse fails with a
   message. `dir` is the test's directory. */
static void test_persistence(const char *dir) {
    folio_cache_options o;
    folio_cache c = {0};
    char path[4096], segdir[4096], missing[4096];
    struct stat st;
    int64_t keeper;
    int n;

    CHECK(folio_cache_options_init(&o) == 0);
    CHECK(o.persistent == 1);
    CHECK(o.segment_dir == NULL);
    o.capacity_bytes = 8u << 20;
    CHECK(folio_cache_create(&o, &c) == 0);
    keeper = folio_cache_keeper_pid(c);
    CHECK(keeper > 0 && keeper != (int64_t)getpid());
    CHECK(process_alive(keeper));
    CHECK(parent_of(keeper) != (int64_t)getpid()); /* nobody's zombie of ours */
    n = folio_cache_segment_path(c, path, sizeof path);
    CHECK(n > 0 && (size_t)n == strlen(path));
    /* In the user's private home, /dev/shm/folio-<euid>, mode 0700. */
    {
        char home[64];
        snprintf(home, sizeof home, "/dev/shm/folio-%u/", (unsigned)geteuid());
        CHECK(strncmp(path, home, strlen(home)) == 0);
        home[strlen(home) - 1] = '\0';
        CHECK(lstat(home, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid());
        CHECK((st.st_mode & 0022) == 0);
    }
    CHECK(lstat(path, &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    /* 0600, and the keeper's vouch mark (S_ISVTX: docs/persistence.md), set before the
       create returned. */
    CHECK((st.st_mode & 07777) == (0600 | S_ISVTX));
    CHECK(st.st_uid == geteuid());
    {
        /* Too short (no room for the NUL): -ERANGE, nothing written. NULL: -EFAULT, or
           -ERANGE with no room at all. */
        char small[8];
        char exact[4096];
        memset(small, 'x', sizeof small);
        CHECK(folio_cache_segment_path(c, small, sizeof small) == -ERANGE);
        CHECK(small[0] == 'x');
        CHECK(last_error_has("bytes with its NUL"));
        memset(exact, 'x', sizeof exact);
        CHECK(folio_cache_segment_path(c, exact, (size_t)n) == -ERANGE);
        CHECK(exact[0] == 'x');
        CHECK(folio_cache_segment_path(c, exact, (size_t)n + 1) == n);
        CHECK(strcmp(exact, path) == 0);
        CHECK(folio_cache_segment_path(c, NULL, 16) == -EFAULT);
        CHECK(folio_cache_segment_path(c, NULL, 0) == -ERANGE);
    }
    CHECK(folio_cache_destroy(c) == 0);
    /* The segment goes with the cache; the keeper, told so, exits on its own. */
    CHECK(lstat(path, &st) != 0 && errno == ENOENT);
    CHECK(wait_keeper_done(keeper, path));
    CHECK(folio_cache_keeper_pid(c) == -EBADF);
    CHECK(folio_cache_segment_path(c, path, sizeof path) == -EBADF);
    CHECK(folio_cache_keeper_pid((folio_cache){0}) == -EBADF);

    /* persistent = 0: the process's own memory, no segment, no keeper. */
    folio_cache_options_init(&o);
    o.capacity_bytes = 8u << 20;
    o.persistent = 0;
    o.segment_dir = "/nonexistent/ignored when not persistent";
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_keeper_pid(c) == 0);
    CHECK(folio_cache_segment_path(c, path, sizeof path) == -ENOENT);
    CHECK(last_error_has("not persistent"));
    CHECK(folio_cache_destroy(c) == 0);
    c.id = 0;

    /* persistent other than 0 or 1: -EINVAL, naming the field. */
    folio_cache_options_init(&o);
    o.persistent = 7;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(last_error_has("persistent is 7"));
    CHECK(c.id == 0);

    /* segment_dir: a directory of the caller's (on tmpfs) holds the segment, and nothing
       after. */
    snprintf(segdir, sizeof segdir, "/dev/shm/folio-abi-test-XXXXXX");
    CHECK(mkdtemp(segdir) != NULL);
    folio_cache_options_init(&o);
    CHECK(o.segment_dir_on_disk == 0);
    o.capacity_bytes = 4u << 20;
    o.segment_dir = segdir;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_segment_path(c, path, sizeof path) > 0);
    CHECK(strncmp(path, segdir, strlen(segdir)) == 0 && path[strlen(segdir)] == '/');
    CHECK(count_entries(segdir) == 1);
    keeper = folio_cache_keeper_pid(c);
    {
        /* It works as any cache: a write read back, on disk after the destroy. */
        char file[4096];
        folio_file w;
        uint8_t b[5000], back[5000];
        for (size_t i = 0; i < sizeof b; i++) b[i] = written(i, 7);
        snprintf(file, sizeof file, "%s/persistent.bin", dir);
        CHECK(folio_open2(c, file, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &w) == 0);
        CHECK(folio_write(w, b, sizeof b, 0) == (int64_t)sizeof b);
        CHECK(folio_read(w, back, sizeof back, 0) == (int64_t)sizeof back);
        CHECK(memcmp(back, b, sizeof b) == 0);
        CHECK(folio_close(w) == 0);
        CHECK(folio_cache_destroy(c) == 0);
        CHECK(disk_holds_written(file, sizeof b, 7));
        unlink(file);
    }
    CHECK(wait_keeper_done(keeper, path));
    CHECK(count_entries(segdir) == 0);
    c.id = 0;

    /* Why a named segment is not kept: 0 (nothing written) when it is, as for a process
       that cannot change its credentials (no witness needed). Root, with the tests'
       lever FOLIO_KEEPER_NO_WITNESS=1 (its keeper acts as if it could not watch it): the
       cache works, the name is gone at once, and the call says why. */
    o.segment_name = "not-kept";
    o.kept_steward = 0; /* the keeper ends after the destroy; the test removes the segment */
    CHECK(folio_cache_create(&o, &c) == 0);
    if (geteuid() != 0) {
        memset(path, 'x', sizeof path);
        CHECK(folio_cache_segment_not_kept_because(c, path, sizeof path) == 0);
        CHECK(path[0] == 'x');
        CHECK(count_entries(segdir) == 1);
    }
    CHECK(folio_cache_segment_not_kept_because(c, NULL, 16) == -EFAULT);
    keeper = folio_cache_keeper_pid(c);
    CHECK(folio_cache_segment_path(c, path, sizeof path) > 0);
    CHECK(folio_cache_destroy(c) == 0);
    unlink(path); /* kept for the next cache of its name: not wanted here */
    CHECK(wait_keeper_done(keeper, path));
    if (geteuid() == 0) {
        char why[1024], small[8];
        int n;
        CHECK(setenv("FOLIO_KEEPER_NO_WITNESS", "1", 1) == 0);
        CHECK(folio_cache_create(&o, &c) == 0);
        CHECK(unsetenv("FOLIO_KEEPER_NO_WITNESS") == 0);
        n = folio_cache_segment_not_kept_because(c, why, sizeof why);
        CHECK(n > 0 && (size_t)n == strlen(why) && strstr(why, "FOLIO_KEEPER_NO_WITNESS"));
        CHECK(count_entries(segdir) == 0);
        memset(small, 'x', sizeof small);
        CHECK(folio_cache_segment_not_kept_because(c, small, sizeof small) == -ERANGE);
        CHECK(small[0] == 'x');
        keeper = folio_cache_keeper_pid(c);
        CHECK(folio_cache_destroy(c) == 0);
        CHECK(wait_keeper_done(keeper, path));
    }
    CHECK(count_entries(segdir) == 0);
    o.segment_name = NULL;
    o.kept_steward = 1;
    c.id = 0;

    /* A segment_dir that does not exist, is a file, or is empty: the call fails and
       says which directory. */
    snprintf(missing, sizeof missing, "%s/no-such-dir", dir);
    o.segment_dir = missing;
    CHECK(folio_cache_create(&o, &c) == -ENOENT);
    CHECK(last_error_has("segment_dir") && last_error_has(missing));
    o.segment_dir = path_pattern;
    CHECK(folio_cache_create(&o, &c) == -ENOTDIR);
    CHECK(last_error_has(path_pattern));
    o.segment_dir = "";
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(last_error_has("segment_dir is empty"));
    /* One other users could write into, sticky or not: -EACCES (not an option's mistake:
       a caller may retry without it). */
    CHECK(chmod(segdir, 0777) == 0);
    o.segment_dir = segdir;
    CHECK(folio_cache_create(&o, &c) == -EACCES);
    CHECK(last_error_has("others can write it") && last_error_has(segdir));
    CHECK(c.id == 0);
    CHECK(chmod(segdir, 01777) == 0);
    CHECK(folio_cache_create(&o, &c) == -EACCES);
    CHECK(c.id == 0);
    CHECK(count_entries(segdir) == 0);
    CHECK(chmod(segdir, 0700) == 0);
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    c.id = 0;
    rmdir(segdir);
    /* A directory on a disk file system (the test's own, unless it is on tmpfs): refused
       with -EOPNOTSUPP unless segment_dir_on_disk says so; 2: -EINVAL. */
    {
        struct statfs fs;
        snprintf(segdir, sizeof segdir, "%s/disk-segments", dir);
        CHECK(mkdir(segdir, 0700) == 0);
        CHECK(statfs(segdir, &fs) == 0);
        o.segment_dir = segdir;
        if (fs.f_type != TMPFS_MAGIC) {
            CHECK(folio_cache_create(&o, &c) == -EOPNOTSUPP);
            CHECK(last_error_has("not on tmpfs") && last_error_has("segment_dir_on_disk"));
            CHECK(c.id == 0);
        }
        o.segment_dir_on_disk = 2;
        CHECK(folio_cache_create(&o, &c) == -EINVAL);
        CHECK(last_error_has("segment_dir_on_disk is 2"));
        o.segment_dir_on_disk = 1;
        CHECK(folio_cache_create(&o, &c) == 0);
        CHECK(folio_cache_destroy(c) == 0);
        c.id = 0;
        CHECK(count_entries(segdir) == 0);
        rmdir(segdir);
    }
}

/* Waits up to 30 s until process `pid` has exited; returns whether it did. */
static int wait_exited(int64_t pid) {
    for (int i = 0; i < 3000; i++) {
        if (!process_alive(pid)) return 1;
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return 0;
}

/* Waits up to 30 s until the keeper `pid` of a named cache just destroyed is done with
   the segment at `segment` (its final writeback, if any, over): it stays as the kept
   segment's steward (kept_steward 1, the default), which holds a record lock on the byte
   2^62 of the segment (folio-stat list's holder "steward"), or it exited (kept_steward
   0). Returns whether it did. */
static int wait_kept(int64_t pid, const char *segment) {
    for (int i = 0; i < 3000; i++) {
        int fd = open(segment, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            struct flock probe = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                                  .l_start = (off_t)1 << 62, .l_len = 1};
            int steward = fcntl(fd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
            close(fd);
            if (steward) return 1;
        }
        if (!process_alive(pid)) return 1;
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return 0;
}

/* A named cache in a private segment directory: `keep.bin` read through it, `gone.bin`
   read, then changed on disk while no cache holds the segment, and `written.bin` written
   through it. Destroyed, the segment stays; the next cache of the name adopts it: the
   pages of the unchanged files are cached at once (read with no I/O, the right bytes),
   the changed file's are dropped (its new bytes read from disk). */
static void test_adoption(const char *dir) {
    enum { KEEP_BYTES = 1u << 20, GONE_BYTES = 64u << 10, WRITTEN_BYTES = 100 * 1000 };
    folio_cache_options o;
    folio_cache c = {0}, other = {0};
    folio_adoption a;
    folio_file f;
    folio_handle_stats hs;
    char segdir[2048], keep[4096], gone[4096], wfile[4096], segment[4096], again[4096];
    static uint8_t buf[KEEP_BYTES];
    int64_t keeper;

    snprintf(segdir, sizeof segdir, "/dev/shm/folio-abi-adopt-XXXXXX");
    snprintf(keep, sizeof keep, "%s/keep.bin", dir);
    snprintf(gone, sizeof gone, "%s/gone.bin", dir);
    snprintf(wfile, sizeof wfile, "%s/written.bin", dir);
    CHECK(mkdtemp(segdir) != NULL);
    write_pattern_file(keep, KEEP_BYTES);
    write_pattern_file(gone, GONE_BYTES);

    options_init_fixed(&o);
    CHECK(o.segment_name == NULL);
    CHECK(o.unusable_segment == FOLIO_UNUSABLE_SEGMENT_REPLACE);
    o.capacity_bytes = 16u << 20;
    o.segment_dir = segdir;
    o.segment_name = "abi-adopt";
    CHECK(folio_cache_create(&o, &c) == 0);
    /* The first cache of the name adopts nothing. */
    memset(&a, 0x55, sizeof a);
    CHECK(folio_cache_adoption(c, &a) == 0);
    CHECK(a.pages_kept == 0 && a.pages_dropped == 0 && a.files_kept == 0 &&
          a.files_dropped == 0 && a.bytes_written_back == 0 && a.replaced == 0 &&
          a.pages_of_changed_files == 0 && a.pages_unproven == 0 && a.pages_over_capacity == 0);
    CHECK(folio_cache_adoption(c, NULL) == -EFAULT);
    CHECK(folio_cache_segment_path(c, segment, sizeof segment) > 0);
    snprintf(again, sizeof again, "%s/abi-adopt", segdir);
    CHECK(strcmp(segment, again) == 0);
    keeper = folio_cache_keeper_pid(c);
    /* A name a live cache holds: -EAGAIN, and the live one is untouched. */
    CHECK(folio_cache_create(&o, &other) == -EAGAIN);
    CHECK(last_error_has("segment_name"));
    CHECK(other.id == 0);

    CHECK(folio_open(c, keep, &f) == 0);
    CHECK(folio_read(f, buf, KEEP_BYTES, 0) == KEEP_BYTES);
    CHECK(matches_pattern(buf, 0, KEEP_BYTES));
    CHECK(folio_close(f) == 0);
    CHECK(folio_open(c, gone, &f) == 0);
    CHECK(folio_read(f, buf, GONE_BYTES, 0) == GONE_BYTES);
    CHECK(folio_close(f) == 0);
    {
        static uint8_t b[WRITTEN_BYTES];
        for (size_t i = 0; i < sizeof b; i++) b[i] = written(i, 5);
        CHECK(folio_open2(c, wfile, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE | FOLIO_OPEN_TRUNCATE,
                          &f) == 0);
        CHECK(folio_write(f, b, sizeof b, 0) == (int64_t)sizeof b);
        CHECK(folio_sync(f, FOLIO_SYNC_ALL, 0, 0) == 0);
        CHECK(folio_close(f) == 0);
    }
    CHECK(o.kept_steward == 1);
    CHECK(folio_cache_destroy(c) == 0);
    /* The named segment outlives the cache; its keeper stays as its steward. */
    CHECK(keeper > 0 && wait_kept(keeper, segment));
    CHECK(process_alive(keeper));
    CHECK(count_entries(segdir) == 1);
    {
        /* gone.bin changes while nobody holds the segment: every byte, same size. */
        FILE *w = fopen(gone, "r+b");
        CHECK(w != NULL);
        if (w) {
            for (uint32_t i = 0; i < GONE_BYTES; i++) fputc(pattern(i) ^ 0xA5, w);
            CHECK(fclose(w) == 0);
        }
    }

    c.id = 0;
    CHECK(folio_cache_create(&o, &c) == 0);
    memset(&a, 0, sizeof a);
    CHECK(folio_cache_adoption(c, &a) == 1);
    /* The adoption wakes the old steward: it leaves. */
    CHECK(wait_exited(keeper));
    /* keep.bin's 256 pages at least, and written.bin's (clean after the final writeback). */
    CHECK(a.pages_kept >= KEEP_BYTES / 4096);
    CHECK(a.files_kept >= 1);
    CHECK(a.files_dropped >= 1);  /* gone.bin */
    CHECK(a.pages_dropped >= 1);
    CHECK(a.pages_of_changed_files >= 1 && a.pages_of_changed_files <= a.pages_dropped);
    CHECK(a.pages_dropped ==
          a.pages_of_changed_files + a.pages_unproven + a.pages_over_capacity);
    CHECK(a.replaced == 0);
    CHECK(a.bytes_written_back == 0); /* a clean exit left nothing dirty */
    CHECK(folio_open(c, keep, &f) == 0);
    memset(buf, 0, KEEP_BYTES);
    CHECK(folio_read(f, buf, KEEP_BYTES, 0) == KEEP_BYTES);
    CHECK(matches_pattern(buf, 0, KEEP_BYTES));
    CHECK(folio_file_stats(f, &hs) == 0);
    CHECK(hs.read_io_bytes == 0); /* every page was adopted */
    CHECK(folio_close(f) == 0);
    CHECK(folio_open(c, gone, &f) == 0);
    CHECK(folio_read(f, buf, GONE_BYTES, 0) == GONE_BYTES);
    {
        int ok = 1;
        for (uint32_t i = 0; i < GONE_BYTES; i++) ok &= buf[i] == (uint8_t)(pattern(i) ^ 0xA5);
        CHECK(ok); /* the new bytes, not the adopted ones */
    }
    CHECK(folio_close(f) == 0);
    CHECK(folio_open(c, wfile, &f) == 0);
    CHECK(folio_read(f, buf, WRITTEN_BYTES, 0) == WRITTEN_BYTES);
    {
        int ok = 1;
        for (uint32_t i = 0; i < WRITTEN_BYTES; i++) ok &= buf[i] == written(i, 5);
        CHECK(ok);
    }
    CHECK(folio_close(f) == 0);
    CHECK(folio_cache_adoption((folio_cache){0}, &a) == -EBADF);
    keeper = folio_cache_keeper_pid(c);
    CHECK(folio_cache_destroy(c) == 0);
    CHECK(keeper > 0 && wait_kept(keeper, segment));
    CHECK(unlink(segment) == 0);
    /* A removed segment's steward leaves too (at its next tick). */
    CHECK(wait_exited(keeper));

    /* kept_steward 0: the keeper exits, the segment stays held by nobody; anything but 0
       or 1 is a bad option. */
    o.kept_steward = 0;
    c.id = 0;
    CHECK(folio_cache_create(&o, &c) == 0);
    keeper = folio_cache_keeper_pid(c);
    CHECK(folio_cache_destroy(c) == 0);
    CHECK(keeper > 0 && wait_exited(keeper));
    CHECK(count_entries(segdir) == 1);
    CHECK(unlink(segment) == 0);
    o.kept_steward = 2;
    c.id = 0;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(last_error_has("kept_steward is 2"));
    CHECK(c.id == 0);
    CHECK(count_entries(segdir) == 0);

    /* Unnamed, or not persistent: nothing adopted, nothing left. */
    options_init_fixed(&o);
    o.capacity_bytes = 4u << 20;
    o.segment_dir = segdir;
    c.id = 0;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_adoption(c, &a) == 0 && a.pages_kept == 0);
    CHECK(folio_cache_destroy(c) == 0);
    o.persistent = 0;
    o.segment_name = "ignored-when-not-persistent";
    c.id = 0;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_adoption(c, &a) == 0);
    CHECK(folio_cache_destroy(c) == 0);

    /* A segment of the name that is not one (garbage): refused with -EBADMSG under
       FOLIO_UNUSABLE_SEGMENT_REFUSE and left there; replaced by default. */
    {
        char bad[4096];
        int fd;
        snprintf(bad, sizeof bad, "%s/abi-garbage", segdir);
        fd = open(bad, O_CREAT | O_EXCL | O_WRONLY, 0600);
        CHECK(fd >= 0);
        if (fd >= 0) {
            memset(buf, 0x5A, 65536);
            CHECK(write(fd, buf, 65536) == 65536);
            close(fd);
        }
        options_init_fixed(&o);
        o.capacity_bytes = 4u << 20;
        o.segment_dir = segdir;
        o.segment_name = "abi-garbage";
        o.unusable_segment = FOLIO_UNUSABLE_SEGMENT_REFUSE;
        c.id = 0;
        CHECK(folio_cache_create(&o, &c) == -EBADMSG);
        CHECK(c.id == 0);
        CHECK(count_entries(segdir) == 1);
        o.unusable_segment = FOLIO_UNUSABLE_SEGMENT_REPLACE;
        CHECK(folio_cache_create(&o, &c) == 0);
        CHECK(folio_cache_adoption(c, &a) == 0);
        CHECK(a.replaced == 1 && a.pages_kept == 0);
        keeper = folio_cache_keeper_pid(c);
        CHECK(folio_cache_destroy(c) == 0);
        CHECK(keeper > 0 && wait_kept(keeper, bad));
        unlink(bad);
        CHECK(wait_exited(keeper));
    }

    /* The naming options' misuse: -EINVAL, naming the field. */
    options_init_fixed(&o);
    o.segment_dir = segdir;
    c.id = 0;
    o.segment_name = "";
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(last_error_has("segment_name is empty"));
    o.segment_name = "a/b";
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(last_error_has("not one plain file name"));
    o.segment_name = "..";
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(last_error_has("not one plain file name"));
    o.segment_name = "a\nb";
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(last_error_has("control character"));
    o.segment_name = "-rf";
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(last_error_has("starts with '-'"));
    o.segment_name = "fine";
    o.unusable_segment = 7;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    CHECK(last_error_has("unusable_segment 7"));
    CHECK(c.id == 0);
    CHECK(count_entries(segdir) == 0);
    rmdir(segdir);
    unlink(keep);
    unlink(gone);
    unlink(wfile);
}

/* What a returned folio_write promises with the defaults: a process SIGKILLed after
   writing, without a sync or a close, leaves the bytes in the file: its keeper writes
   them back, then exits and removes the segment. Runs first, before this process has
   threads of its own (the child is forked). */
static void test_persistence_survives_sigkill(const char *dir) {
    enum { BYTES = 300 * 1000 + 123 };
    char file[4096], segment[4096] = {0};
    int pipefd[2];
    pid_t child;
    int status = 0;
    long long keeper = 0;

    snprintf(file, sizeof file, "%s/killed.bin", dir);
    unlink(file);
    if (pipe(pipefd) != 0) { perror("pipe"); exit(2); }
    child = fork();
    if (child < 0) { perror("fork"); exit(2); }
    if (child == 0) {
        /* The child: the defaults but a small capacity; unaligned writes; no sync. */
        folio_cache_options o;
        folio_cache c;
        folio_file w;
        static uint8_t b[BYTES];
        char line[4200];
        close(pipefd[0]);
        folio_cache_options_init(&o);
        o.capacity_bytes = 16u << 20;
        o.dirty_expire_ms = 3600 * 1000; /* nothing written back before the kill */
        o.write_behind_bytes = 0;
        if (folio_cache_create(&o, &c) != 0) _exit(3);
        if (folio_open2(c, file, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &w) != 0) _exit(4);
        for (size_t i = 0; i < BYTES; i++) b[i] = written(i, 3);
        for (size_t at = 0; at < BYTES; at += 7001) {
            size_t len = BYTES - at < 7001 ? BYTES - at : 7001;
            if (folio_write(w, b + at, len, at) != (int64_t)len) _exit(5);
        }
        if (folio_cache_segment_path(c, segment, sizeof segment) <= 0) _exit(6);
        snprintf(line, sizeof line, "%lld %s\n", (long long)folio_cache_keeper_pid(c),
                 segment);
        if (write(pipefd[1], line, strlen(line)) != (ssize_t)strlen(line)) _exit(7);
        raise(SIGKILL);
        _exit(8);
    }
    close(pipefd[1]);
    {
        char line[4200] = {0};
        size_t got = 0;
        ssize_t r;
        while (got < sizeof line - 1 && (r = read(pipefd[0], line + got, sizeof line - 1 - got)) > 0)
            got += (size_t)r;
        close(pipefd[0]);
        CHECK(sscanf(line, "%lld %4095s", &keeper, segment) == 2);
    }
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK(keeper > 0);
    CHECK(keeper > 0 && wait_keeper_done(keeper, segment));
    CHECK(disk_size(file) == BYTES);
    CHECK(disk_holds_written(file, BYTES, 3));
    unlink(file);
}

static void test_open2(folio_cache c) {
    char path[4200], fresh[4200];
    folio_file f = {0}, g;
    uint64_t len = 1;

    snprintf(path, sizeof path, "%s.open2", path_pattern);
    snprintf(fresh, sizeof fresh, "%s.open2-new", path_pattern);
    copy_pattern_file(path, 10000);
    unlink(fresh);

    /* Flags that cannot be meant. */
    CHECK(folio_open2(c, path, FOLIO_OPEN_CREATE, &f) == -EINVAL);
    CHECK(folio_open2(c, path, FOLIO_OPEN_TRUNCATE, &f) == -EINVAL);
    CHECK(folio_open2(c, path, FOLIO_OPEN_CREATE_NEW, &f) == -EINVAL);
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE | FOLIO_OPEN_CREATE_NEW,
                      &f) == -EINVAL);
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | 32, &f) == -EINVAL);
    CHECK(folio_open2(c, path, 0x80000000u, &f) == -EINVAL);
    CHECK(folio_open2(c, fresh, FOLIO_OPEN_CREATE, &f) == -EINVAL);
    CHECK(access(fresh, F_OK) != 0); /* refused before anything was created */
    CHECK(folio_open2(c, NULL, FOLIO_OPEN_WRITE, &f) == -EFAULT);
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE, NULL) == -EFAULT);
    CHECK(folio_open2(c, path_missing, FOLIO_OPEN_WRITE, &f) == -ENOENT);
    CHECK(folio_open2(c, path_dir, FOLIO_OPEN_WRITE, &f) == -EISDIR);
    CHECK(folio_open2(c, path_dir, 0, &f) == -EISDIR);
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE_NEW, &f) == -EEXIST);
    CHECK(f.id == 0); /* untouched by every failure */
    if (geteuid() != 0) { /* root may write anything */
        char ro[4300];
        snprintf(ro, sizeof ro, "%s.ro", path);
        copy_pattern_file(ro, 100);
        CHECK(chmod(ro, 0444) == 0);
        CHECK(folio_open2(c, ro, FOLIO_OPEN_WRITE, &f) == -EACCES);
        CHECK(folio_open2(c, ro, 0, &f) == 0 && folio_close(f) == 0);
        unlink(ro);
    }

    /* 0: read-only, as folio_open. Writing through it is -EBADF (write(2) on an O_RDONLY
       descriptor), whatever else is wrong with the call. */
    CHECK(folio_open2(c, path, 0, &f) == 0);
    {
        uint8_t b[100];
        CHECK(folio_read(f, b, sizeof b, 50) == 100 && matches_pattern(b, 50, 100));
        CHECK(folio_write(f, b, sizeof b, 0) == -EBADF);
        {
            char msg[256];
            folio_last_error_message(msg, sizeof msg);
            CHECK(strstr(msg, "folio_write") != NULL && strstr(msg, "read-only") != NULL);
        }
        CHECK(folio_write(f, NULL, 0, 0) == -EBADF);
        CHECK(folio_write(f, NULL, 10, 0) == -EBADF);
        CHECK(folio_set_len(f, 0) == -EBADF);
        CHECK(folio_set_len(f, UINT64_MAX) == -EBADF);
        CHECK(folio_file_len(f, &len) == 0 && len == 10000);
        /* Syncs and writeback take any handle, as fsync(2) does. */
        CHECK(folio_sync(f, FOLIO_SYNC_DATA, 0, 0) == 0);
        CHECK(folio_writeback(f, 0, 10000) == 0);
    }
    CHECK(folio_close(f) == 0);

    /* CREATE makes a missing file; CREATE_NEW one that must not exist. */
    CHECK(folio_open2(c, fresh, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &f) == 0);
    CHECK(access(fresh, F_OK) == 0);
    CHECK(folio_file_len(f, &len) == 0 && len == 0);
    CHECK(folio_close(f) == 0);
    CHECK(folio_open2(c, fresh, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &f) == 0); /* exists */
    {
        /* Written through the cache, then opened again and read back: no device read,
           and the handle's stats say so; another file's cold read does count. */
        uint8_t b[10000];
        folio_handle_stats hs = {1, 1};
        memset(b, 0x5a, sizeof b);
        CHECK(folio_write(f, b, sizeof b, 0) == (int64_t)sizeof b);
        CHECK(folio_sync(f, FOLIO_SYNC_DATA, 0, 0) == 0);
        CHECK(folio_file_stats(f, &hs) == 0 && hs.read_io_requests == 0 && hs.read_io_bytes == 0);
        CHECK(folio_close(f) == 0);
        CHECK(folio_open2(c, fresh, 0, &f) == 0);
        memset(b, 0, sizeof b);
        CHECK(folio_read(f, b, sizeof b, 0) == (int64_t)sizeof b && b[0] == 0x5a && b[9999] == 0x5a);
        CHECK(folio_file_stats(f, &hs) == 0 && hs.read_io_requests == 0 && hs.read_io_bytes == 0);
        CHECK(folio_file_stats(f, NULL) == -EFAULT);
        CHECK(folio_close(f) == 0);
        CHECK(folio_file_stats(f, &hs) == -EBADF); /* closed */
    }
    unlink(fresh);
    CHECK(folio_open2(c, fresh, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE_NEW | FOLIO_OPEN_TRUNCATE,
                      &f) == 0);
    CHECK(folio_close(f) == 0);
    CHECK(folio_open2(c, fresh, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE_NEW, &f) == -EEXIST);
    unlink(fresh);

    /* TRUNCATE: through the cache, so a handle open before (with the pages cached) sees
       the file empty; the disk too. */
    CHECK(folio_open(c, path, &g) == 0);
    {
        uint8_t b[4096];
        CHECK(folio_read(g, b, sizeof b, 0) == (int64_t)sizeof b);
    }
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_TRUNCATE, &f) == 0);
    CHECK(folio_file_len(g, &len) == 0 && len == 0);
    {
        uint8_t b[16];
        CHECK(folio_read(g, b, sizeof b, 0) == 0);
    }
    CHECK(disk_size(path) == 0);
    CHECK(folio_close(f) == 0);
    CHECK(folio_close(g) == 0);
    unlink(path);
}

/* Writes of every shape read back through every handle, reach the disk at a sync, and
   every misuse of the calls gets its errno. */
static void test_write_and_sync(folio_cache c) {
    enum { SIZE = (3u << 20) + 777u };
    char path[4200];
    uint8_t *model = calloc(SIZE + (1u << 20), 1), *buf = malloc(SIZE + (1u << 20));
    uint64_t len = 0, seed = 7, model_len = 0;
    folio_file w, r;
    folio_stats before, after;

    snprintf(path, sizeof path, "%s.write", path_pattern);
    unlink(path);
    CHECK(folio_cache_stats(c, &before) == 0);
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &w) == 0);
    CHECK(folio_open(c, path, &r) == 0);

    /* Appends in odd sizes: the file grows with each. */
    {
        static const size_t sizes[] = {1, 4095, 4097, 8192, 333, 70001, 1 << 20};
        int ok = 1;
        for (size_t i = 0; model_len < SIZE && ok; i++) {
            size_t n = sizes[i % (sizeof sizes / sizeof sizes[0])];
            if (n > SIZE - model_len) n = SIZE - model_len;
            for (size_t j = 0; j < n; j++) model[model_len + j] = written(model_len + j, 0);
            ok = folio_write(w, model + model_len, n, model_len) == (int64_t)n;
            model_len += n;
            ok = ok && folio_file_len(r, &len) == 0 && len == model_len;
        }
        CHECK(ok);
    }
    /* Overwrites at random places and lengths, some past the end (a hole, then zeros). */
    {
        int ok = 1;
        for (int i = 0; i < 300 && ok; i++) {
            uint64_t off = lcg(&seed) % (SIZE + 4096);
            size_t n = (size_t)(lcg(&seed) % 20000) + 1;
            if (off + n > SIZE + (1u << 20)) n = (size_t)(SIZE + (1u << 20) - off);
            for (size_t j = 0; j < n; j++) model[off + j] = written(off + j, (unsigned)i + 1);
            ok = folio_write(w, model + off, n, off) == (int64_t)n;
            if (off + n > model_len) model_len = off + n;
        }
        CHECK(ok);
    }
    {
        uint64_t hole = model_len + 5000;
        uint8_t tail[100];
        for (size_t j = 0; j < sizeof tail; j++) tail[j] = (uint8_t)(j + 1);
        CHECK(folio_write(w, tail, sizeof tail, hole) == (int64_t)sizeof tail);
        memcpy(model + hole, tail, sizeof tail); /* model[model_len, hole) stays zero */
        model_len = hole + sizeof tail;
    }
    /* Both handles read the model, in one read and in pieces. */
    CHECK(folio_file_len(w, &len) == 0 && len == model_len);
    CHECK(folio_read(r, buf, SIZE + (1u << 20), 0) == (int64_t)model_len);
    CHECK(memcmp(buf, model, model_len) == 0);
    {
        int ok = 1;
        for (int i = 0; i < 500 && ok; i++) {
            uint64_t off = lcg(&seed) % model_len;
            size_t n = (size_t)(lcg(&seed) % 30000);
            size_t expect = model_len - off < n ? (size_t)(model_len - off) : n;
            ok = folio_read(i % 2 ? r : w, buf, n, off) == (int64_t)expect &&
                 memcmp(buf, model + off, expect) == 0;
        }
        CHECK(ok);
    }
    /* A sync puts the model on the disk. */
    CHECK(folio_sync(w, FOLIO_SYNC_DATA, 0, 0) == 0);
    CHECK(disk_size(path) == model_len);
    memset(buf, 0xEE, model_len);
    CHECK(read_disk(path, buf, model_len, 0) == (int64_t)model_len);
    CHECK(memcmp(buf, model, model_len) == 0);
    CHECK(folio_cache_stats(c, &after) == 0);
    CHECK(after.write_requests >= before.write_requests + 300);
    CHECK(after.write_bytes >= before.write_bytes + SIZE);
    CHECK(after.syncs >= before.syncs + 1);
    CHECK(after.pages_written_back >= before.pages_written_back + SIZE / 4096);
    CHECK(after.writeback_bytes >= before.writeback_bytes + SIZE);
    CHECK(after.dirty_pages == 0 && after.writeback_pages == 0);
    CHECK(after.writeback_errors == 0);

    /* Misuse of folio_write. */
    CHECK(folio_write(w, buf, 0, 0) == 0);
    CHECK(folio_write(w, NULL, 0, 123) == 0);
    CHECK(folio_write(w, NULL, 10, 0) == -EFAULT);
    CHECK(folio_write(w, buf, SIZE_MAX, 0) == -EINVAL);
    CHECK(folio_write(w, buf, (size_t)INT64_MAX + 1, 0) == -EINVAL);
    CHECK(folio_write(w, buf, 100, UINT64_MAX - 10) == -EINVAL);
    CHECK(folio_write(w, buf, 1, (uint64_t)1 << 62) == -EFBIG);
    CHECK(folio_file_len(w, &len) == 0 && len == model_len); /* none of them wrote */

    /* folio_sync: kinds, ranges, and their misuse. */
    CHECK(folio_sync(w, 0, 0, 0) == -EINVAL);
    CHECK(folio_sync(w, 4, 0, 0) == -EINVAL);
    CHECK(folio_sync(w, UINT32_MAX, 0, 0) == -EINVAL);
    CHECK(folio_sync(w, FOLIO_SYNC_DATA, 1, 0) == -EINVAL);
    CHECK(folio_sync(w, FOLIO_SYNC_ALL, 0, 1) == -EINVAL);
    CHECK(folio_sync(w, FOLIO_SYNC_RANGE, UINT64_MAX, 2) == -EINVAL);
    CHECK(folio_sync(w, FOLIO_SYNC_ALL, 0, 0) == 0);
    CHECK(folio_sync(w, FOLIO_SYNC_RANGE, 0, 0) == 0);
    /* A range sync writes the range (and not necessarily more). */
    {
        uint8_t b[8192];
        for (size_t j = 0; j < sizeof b; j++) b[j] = (uint8_t)(j * 7 + 3);
        CHECK(folio_write(w, b, sizeof b, 40960) == (int64_t)sizeof b);
        memcpy(model + 40960, b, sizeof b);
        CHECK(folio_sync(w, FOLIO_SYNC_RANGE, 40960, sizeof b) == 0);
        CHECK(read_disk(path, buf, sizeof b, 40960) == (int64_t)sizeof b);
        CHECK(memcmp(buf, b, sizeof b) == 0);
    }
    /* A read-only handle's sync writes what the writer dirtied. */
    {
        uint8_t b[5000];
        for (size_t j = 0; j < sizeof b; j++) b[j] = (uint8_t)(j * 13 + 1);
        CHECK(folio_write(w, b, sizeof b, 1000000) == (int64_t)sizeof b);
        memcpy(model + 1000000, b, sizeof b);
        CHECK(folio_sync(r, FOLIO_SYNC_DATA, 0, 0) == 0);
        CHECK(read_disk(path, buf, sizeof b, 1000000) == (int64_t)sizeof b);
        CHECK(memcmp(buf, b, sizeof b) == 0);
    }

    /* folio_writeback starts writeback and returns; the pages get clean without a sync. */
    {
        uint8_t b[65536];
        int clean = 0;
        for (size_t j = 0; j < sizeof b; j++) b[j] = (uint8_t)(j * 5 + 9);
        CHECK(folio_write(w, b, sizeof b, 2u << 20) == (int64_t)sizeof b);
        memcpy(model + (2u << 20), b, sizeof b);
        CHECK(folio_cache_stats(c, &before) == 0);
        CHECK(before.dirty_pages > 0);
        CHECK(folio_writeback(w, UINT64_MAX, 2) == -EINVAL);
        CHECK(folio_writeback(w, 0, 0) == 0);
        CHECK(folio_writeback(w, 2u << 20, sizeof b) == 0);
        for (int i = 0; i < 500 && !clean; i++) { /* at most 5 s */
            clean = folio_cache_stats(c, &after) == 0 &&
                    after.pages_written_back >= before.pages_written_back + sizeof b / 4096;
            if (!clean) usleep(10000);
        }
        CHECK(clean);
        CHECK(after.syncs == before.syncs); /* no sync was needed */
        CHECK(read_disk(path, buf, sizeof b, 2u << 20) == (int64_t)sizeof b);
        CHECK(memcmp(buf, b, sizeof b) == 0);
    }

    /* folio_set_len: shorter drops the tail (and the disk's), longer reads zeros. */
    CHECK(folio_set_len(w, 5000) == 0);
    CHECK(folio_file_len(r, &len) == 0 && len == 5000);
    CHECK(disk_size(path) == 5000);
    CHECK(folio_read(r, buf, 100, 5000) == 0);
    CHECK(folio_set_len(w, 20000) == 0);
    memset(model + 5000, 0, 15000);
    CHECK(folio_read(r, buf, 30000, 0) == 20000);
    CHECK(memcmp(buf, model, 20000) == 0);
    CHECK(folio_set_len(w, ((uint64_t)1 << 62) + 1) == -EFBIG);
    CHECK(folio_sync(w, FOLIO_SYNC_ALL, 0, 0) == 0);
    CHECK(disk_size(path) == 20000);
    CHECK(read_disk(path, buf, 20000, 0) == 20000);
    CHECK(memcmp(buf, model, 20000) == 0);

    /* refresh_len keeps the length folio gave a written file (its writes are newer than
       the disk), before a sync too. */
    CHECK(folio_write(w, model, 100, 30000) == 100);
    CHECK(folio_file_refresh_len(r, &len) == 0 && len == 30100);

    /* folio_cache_sync_all: every file, handles closed or not. */
    CHECK(folio_write(w, model, 4096, 8192) == 4096);
    CHECK(folio_close(w) == 0);
    CHECK(folio_write(w, model, 1, 0) == -EBADF);
    CHECK(folio_set_len(w, 0) == -EBADF);
    CHECK(folio_sync(w, FOLIO_SYNC_DATA, 0, 0) == -EBADF);
    CHECK(folio_writeback(w, 0, 1) == -EBADF);
    CHECK(folio_cache_sync_all(c) == 0);
    CHECK(disk_size(path) == 30100);
    CHECK(read_disk(path, buf, 4096, 8192) == 4096 && memcmp(buf, model, 4096) == 0);
    CHECK(read_disk(path, buf, 100, 30000) == 100 && memcmp(buf, model, 100) == 0);
    CHECK(folio_cache_stats(c, &after) == 0 && after.dirty_pages == 0);
    CHECK(folio_close(r) == 0);
    unlink(path);
    free(model);
    free(buf);
}

/* The options' dirty thresholds reach the cache: a small dirty limit throttles writers
   and holds dirty memory under it; a 0 expiry writes dirty data back without a sync; a
   long one does not. */
static void test_dirty_options(void) {
    enum { LIMIT = 64u << 10 };
    folio_cache_options o;
    folio_cache c;
    folio_file f;
    folio_stats s;
    char path[4200];
    uint8_t b[16384];
    int ok = 1, clean = 0;

    snprintf(path, sizeof path, "%s.dirty", path_pattern);
    unlink(path);
    options_init_fixed(&o);
    o.capacity_bytes = 8u << 20;
    o.dirty_limit_bytes = LIMIT;
    o.dirty_background_bytes = LIMIT / 2;
    o.dirty_expire_ms = 0;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &f) == 0);
    for (uint64_t off = 0; off < (1u << 20) && ok; off += sizeof b) {
        for (size_t j = 0; j < sizeof b; j++) b[j] = written(off + j, 9);
        ok = folio_write(f, b, sizeof b, off) == (int64_t)sizeof b;
        ok = ok && folio_cache_stats(c, &s) == 0 && s.dirty_pages * 4096 <= LIMIT;
    }
    CHECK(ok);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.throttled_writers > 0);
    CHECK(s.throttled_ns > 0);
    /* Over the background threshold, writeback cleans the rest without a sync. */
    for (int i = 0; i < 500 && !clean; i++) { /* at most 5 s */
        clean = folio_cache_stats(c, &s) == 0 && s.dirty_pages == 0 && s.writeback_pages == 0;
        if (!clean) usleep(10000);
    }
    CHECK(clean);
    CHECK(s.syncs == 0);
    CHECK(disk_holds_written(path, 1u << 20, 9));
    /* Below it, expiry 0 has the background writeback (every 100 ms) write a page back
       well before the default expiry (5 s) would. */
    CHECK(folio_write(f, b, 4096, 0) == 4096);
    clean = 0;
    for (int i = 0; i < 200 && !clean; i++) { /* at most 2 s */
        clean = folio_cache_stats(c, &s) == 0 && s.dirty_pages == 0 && s.writeback_pages == 0;
        if (!clean) usleep(10000);
    }
    CHECK(clean);
    CHECK(folio_close(f) == 0);
    CHECK(folio_cache_destroy(c) == 0);

    /* A minute's expiry and no pressure: nothing is written back on its own. */
    options_init_fixed(&o);
    o.capacity_bytes = 8u << 20;
    o.dirty_expire_ms = 60000;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE, &f) == 0);
    CHECK(folio_write(f, b, 8192, 0) == 8192);
    usleep(300000);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.dirty_pages == 2 && s.pages_written_back == 0);
    CHECK(s.throttled_writers == 0);
    CHECK(folio_close(f) == 0);
    /* Destroying the cache writes its dirty pages back. */
    CHECK(folio_cache_destroy(c) == 0);
    {
        uint8_t back[8192];
        CHECK(read_disk(path, back, sizeof back, 0) == (int64_t)sizeof back);
        CHECK(memcmp(back, b, sizeof back) == 0);
    }
    unlink(path);
}

/* A cache with a domain (folio_cache_options.domain): two handles of one read-only file
   share its pages (the second reads hit the domain), a cache created again in the domain
   finds them cached (the domain outlives a cache: its steward lingers and its memory file
   stays), a handle opened with FOLIO_OPEN_PRIVATE reads the cache's own pages (the
   domain's counts unmoved), two caches of different share weights have shares by them, a
   private cache has no domain counts, and bad names and weights are refused with -EINVAL
   naming the field. The domain's files go in a directory of the test's own. */
static void test_domain(void) {
    enum { PAGES = 16, BYTES = PAGES * 4096 };
    folio_cache_options o;
    folio_cache c = {0}, bad = {0};
    folio_file f1, f2;
    folio_domain_stats d;
    char segdir[2048], file[4096];
    static uint8_t buf[BYTES];
    static char long_name[300];
    const char *suffixes[] = {"domain", "steward", "sock"};

    snprintf(segdir, sizeof segdir, "/dev/shm/folio-abi-domain-XXXXXX");
    CHECK(mkdtemp(segdir) != NULL);
    options_init_fixed(&o);
    CHECK(o.domain == NULL);
    o.capacity_bytes = 16u << 20;
    o.persistent = 0;
    o.segment_dir = segdir;
    o.domain = "abi-domain";
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_open(c, path_pattern, &f1) == 0);
    CHECK(folio_open(c, path_pattern, &f2) == 0);
    memset(&d, 0x55, sizeof d);
    CHECK(folio_cache_domain_stats(c, &d) == 1);
    CHECK(d.hits == 0 && d.misses == 0 && d.files_refused == 0);
    CHECK(folio_read(f1, buf, BYTES, 0) == BYTES);
    CHECK(matches_pattern(buf, 0, BYTES));
    CHECK(folio_cache_domain_stats(c, &d) == 1);
    /* Every page read from the file: a miss, or read ahead with one and then a hit (the
       domain reads a window: one read for several pages). */
    CHECK(d.misses >= 1 && d.hits + d.misses == PAGES && d.preads >= 1 && d.preads <= d.misses);
    /* A whole-file read from the start opens a window: every page that was a hit was read
       ahead (the window may read past the request), and none was read twice (one reader). */
    CHECK(d.windows >= 1 && d.pages_read_ahead >= PAGES - d.misses && d.duplicate_reads == 0);
    CHECK(d.files_newer_here == 0);
    /* The domain's budget: the pages cached, and a quota (the steward moves it). */
    CHECK(d.frames_cached >= PAGES && d.quota_frames > 0);
    /* This process brought every page in: it owns them. It is the domain's one member, so
       its share is the whole quota, and its floor half of it. */
    CHECK(d.owned_frames >= PAGES && d.owned_frames <= d.frames_cached);
    CHECK(d.share_frames == d.quota_frames && d.floor_frames == d.share_frames / 2);
    folio_domain_stats first = d;
    /* The other handle's reads are the domain's hits: no read of the file. */
    memset(buf, 0, sizeof buf);
    CHECK(folio_read(f2, buf, BYTES, 0) == BYTES);
    CHECK(matches_pattern(buf, 0, BYTES));
    CHECK(folio_cache_domain_stats(c, &d) == 1);
    CHECK(d.hits == first.hits + PAGES && d.misses == first.misses && d.preads == first.preads);
    CHECK(folio_cache_domain_stats(c, NULL) == -EFAULT);
    CHECK(folio_close(f1) == 0);
    CHECK(folio_close(f2) == 0);
    CHECK(folio_cache_destroy(c) == 0);

    /* A new cache of the domain: every page is still cached there. */
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_open(c, path_pattern, &f1) == 0);
    memset(buf, 0, sizeof buf);
    CHECK(folio_read(f1, buf, BYTES, 0) == BYTES);
    CHECK(matches_pattern(buf, 0, BYTES));
    CHECK(folio_cache_domain_stats(c, &d) == 1);
    CHECK(d.hits == PAGES && d.misses == 0 && d.preads == 0);
    /* FOLIO_OPEN_PRIVATE: the cache's own pages, not the domain's: the domain's counts do
       not move, and the private cache reads the file (its misses), bytes checked. */
    folio_stats own;
    CHECK(folio_open2(c, path_pattern, FOLIO_OPEN_PRIVATE, &f2) == 0);
    memset(buf, 0, sizeof buf);
    CHECK(folio_read(f2, buf, BYTES, 0) == BYTES);
    CHECK(matches_pattern(buf, 0, BYTES));
    folio_domain_stats after;
    CHECK(folio_cache_domain_stats(c, &after) == 1);
    CHECK(after.hits == d.hits && after.misses == d.misses && after.preads == d.preads);
    CHECK(folio_cache_stats(c, &own) == 0);
    CHECK(own.misses >= 1 && own.io_bytes >= BYTES);
    CHECK(folio_close(f2) == 0);
    CHECK(folio_close(f1) == 0);
    CHECK(folio_cache_destroy(c) == 0);

    /* Weights (share_weight): a cache of weight 300 beside one of the default 100 (two
       members of the domain) has three quarters of the quota as its share, the other a
       quarter, each floor half of it; a weight out of range is refused naming the field. */
    CHECK(o.share_weight == FOLIO_SHARE_WEIGHT_DEFAULT && FOLIO_SHARE_WEIGHT_DEFAULT == 100);
    o.share_weight = 300;
    CHECK(folio_cache_create(&o, &c) == 0);
    o.share_weight = FOLIO_SHARE_WEIGHT_DEFAULT;
    folio_cache light = {0};
    CHECK(folio_cache_create(&o, &light) == 0);
    CHECK(folio_cache_domain_stats(c, &d) == 1);
    CHECK(d.share_frames == d.quota_frames * 300 / 400 && d.floor_frames == d.share_frames / 2);
    CHECK(folio_cache_domain_stats(light, &after) == 1);
    CHECK(after.share_frames == after.quota_frames * 100 / 400);
    CHECK(after.floor_frames == after.share_frames / 2);
    CHECK(folio_cache_destroy(light) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    o.share_weight = FOLIO_SHARE_WEIGHT_MIN - 1;
    CHECK(folio_cache_create(&o, &bad) == -EINVAL);
    CHECK(last_error_has("share_weight 0 outside 1..=10000"));
    o.share_weight = FOLIO_SHARE_WEIGHT_MAX + 1;
    CHECK(folio_cache_create(&o, &bad) == -EINVAL);
    CHECK(bad.id == 0);
    o.share_weight = FOLIO_SHARE_WEIGHT_DEFAULT;

    /* A private cache: no domain, zeros. */
    o.domain = NULL;
    CHECK(folio_cache_create(&o, &c) == 0);
    memset(&d, 0x55, sizeof d);
    CHECK(folio_cache_domain_stats(c, &d) == 0);
    CHECK(d.hits == 0 && d.misses == 0 && d.preads == 0 && d.files_refused == 0);
    CHECK(folio_cache_destroy(c) == 0);
    CHECK(folio_cache_domain_stats(c, &d) == -EBADF);

    /* Bad names: -EINVAL naming the field, no cache. */
    o.domain = "";
    CHECK(folio_cache_create(&o, &bad) == -EINVAL);
    CHECK(last_error_has("domain is empty"));
    o.domain = "a/b";
    CHECK(folio_cache_create(&o, &bad) == -EINVAL);
    CHECK(last_error_has("domain"));
    o.domain = "..";
    CHECK(folio_cache_create(&o, &bad) == -EINVAL);
    CHECK(last_error_has("domain"));
    o.domain = "a\nb";
    CHECK(folio_cache_create(&o, &bad) == -EINVAL);
    CHECK(last_error_has("domain"));
    o.domain = "-rf";
    CHECK(folio_cache_create(&o, &bad) == -EINVAL);
    CHECK(last_error_has("domain"));
    memset(long_name, 'd', 248);
    long_name[248] = 0;
    o.domain = long_name;
    CHECK(folio_cache_create(&o, &bad) == -EINVAL);
    CHECK(last_error_has("domain has 248 bytes"));
    o.domain = "\xff\xfe";
    CHECK(folio_cache_create(&o, &bad) == -EINVAL);
    CHECK(last_error_has("not UTF-8"));
    CHECK(bad.id == 0);

    /* The domain's files were in the test's directory; the steward leaves by itself. */
    /* Named by the region's version (abi-domain.v<VERSION>.domain, .steward, .sock). */
    {
        DIR *d = opendir(segdir);
        struct dirent *e;
        int regions = 0;
        CHECK(d != NULL);
        while ((e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            if (strncmp(e->d_name, "abi-domain.v", 12) != 0) continue;
            for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
                size_t k = strlen(suffixes[i]);
                if (n > k + 1 && e->d_name[n - k - 1] == '.' &&
                    strcmp(e->d_name + n - k, suffixes[i]) == 0)
                    regions += i == 0;
            }
            snprintf(file, sizeof file, "%s/%s", segdir, e->d_name);
            unlink(file);
        }
        closedir(d);
        CHECK(regions == 1);
    }
    rmdir(segdir);
}

/* write_behind_bytes: an appending writer's pages are written back before any sync (the
   default), or stay dirty until one (0, or a threshold larger than what is appended). A
   minute's expiry and a roomy dirty limit, so that nothing else writes them. */
_Static_assert(offsetof(folio_cache_options, write_behind_bytes) == 64,
               "write_behind_bytes follows arena_pages and four bytes of padding");
_Static_assert(offsetof(folio_cache_options, capacity_policy) == 60,
               "capacity_policy sits in the padding after arena_pages");
_Static_assert(offsetof(folio_cache_options, capacity_max_bytes) == 72,
               "capacity_max_bytes follows write_behind_bytes");
_Static_assert(offsetof(folio_cache_options, persistent) == 80,
               "persistent follows capacity_max_bytes");
_Static_assert(offsetof(folio_cache_options, segment_dir) == 88,
               "segment_dir follows persistent and four bytes of padding");
_Static_assert(offsetof(folio_cache_options, segment_name) == 96,
               "segment_name follows segment_dir");
_Static_assert(offsetof(folio_cache_options, unusable_segment) == 104,
               "unusable_segment follows segment_name");
_Static_assert(offsetof(folio_cache_options, kept_steward) == 112,
               "kept_steward follows segment_dir_on_disk");
_Static_assert(offsetof(folio_cache_options, domain) == 120, "domain follows kept_steward");
_Static_assert(offsetof(folio_cache_options, share_weight) == 128, "share_weight follows domain");
_Static_assert(sizeof(folio_cache_options) == 136, "folio_cache_options is 136 bytes");

static void test_write_behind(void) {
    enum { APPEND_BYTES = 1u << 20, PAGES = APPEND_BYTES / 4096 };
    const uint64_t thresholds[] = {FOLIO_WRITE_BEHIND_BYTES_DEFAULT, 0, 2u << 20};
    folio_cache_options o;
    folio_cache c;
    folio_file f;
    folio_stats s;
    char path[4200];
    uint8_t b[65536];
    int ok = 1;

    snprintf(path, sizeof path, "%s.behind", path_pattern);
    for (size_t t = 0; t < sizeof thresholds / sizeof thresholds[0]; t++) {
        unlink(path);
        options_init_fixed(&o);
        o.capacity_bytes = 16u << 20;
        o.dirty_limit_bytes = 8u << 20;
        o.dirty_background_bytes = 8u << 20;
        o.dirty_expire_ms = 60000;
        o.write_behind_bytes = thresholds[t];
        CHECK(folio_cache_create(&o, &c) == 0);
        CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &f) == 0);
        for (uint64_t off = 0; off < APPEND_BYTES && ok; off += sizeof b) {
            for (size_t j = 0; j < sizeof b; j++) b[j] = written(off + j, 5);
            ok = folio_write(f, b, sizeof b, off) == (int64_t)sizeof b;
        }
        CHECK(ok);
        if (thresholds[t] == FOLIO_WRITE_BEHIND_BYTES_DEFAULT) {
            /* Each 256 KiB appended is handed to writeback; the writes end on page
               boundaries, so no folio is left being filled and all of it goes. */
            int clean = 0;
            for (int i = 0; i < 500 && !clean; i++) { /* at most 5 s */
                clean = folio_cache_stats(c, &s) == 0 && s.pages_written_back == PAGES &&
                        s.dirty_pages == 0 && s.writeback_pages == 0;
                if (!clean) usleep(10000);
            }
            CHECK(clean);
            CHECK(s.syncs == 0);
            CHECK(disk_holds_written(path, APPEND_BYTES, 5));
        } else {
            usleep(300000);
            CHECK(folio_cache_stats(c, &s) == 0);
            CHECK(s.dirty_pages == PAGES && s.pages_written_back == 0);
        }
        /* Either way a sync writes the whole file. */
        CHECK(folio_sync(f, FOLIO_SYNC_DATA, 0, 0) == 0);
        CHECK(disk_holds_written(path, APPEND_BYTES, 5));
        CHECK(folio_close(f) == 0);
        CHECK(folio_cache_destroy(c) == 0);
    }
    unlink(path);
}

/* folio_remove_file: unlinks, and drops a closed file's pages (dirty ones too) and what the
   cache kept of it; with a handle open or another link, the pages stay for them. */
static void test_remove_file(folio_cache c) {
    char path[4200], link2[4300];
    folio_file w, r;
    folio_stats before, closed, s;
    uint8_t b[65536], back[65536];
    uint64_t len = 1;
    int ok = 1;

    snprintf(path, sizeof path, "%s.remove", path_pattern);
    snprintf(link2, sizeof link2, "%s.remove-link", path_pattern);
    unlink(path);
    unlink(link2);

    /* Misuse. */
    CHECK(folio_remove_file((folio_cache){0}, path_pattern) == -EBADF);
    CHECK(folio_remove_file(c, NULL) == -EFAULT);
    CHECK(folio_remove_file(c, path_missing) == -ENOENT);
    CHECK(folio_remove_file(c, path_dir) == -EISDIR);
    CHECK(access(path_dir, F_OK) == 0 && access(path_pattern, F_OK) == 0);

    /* A closed file with dirty pages: they go, unwritten, with the file. */
    CHECK(folio_cache_stats(c, &before) == 0);
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &w) == 0);
    /* Grown first, then filled: not appends, so write-behind leaves the pages dirty. */
    CHECK(folio_set_len(w, 1u << 20) == 0);
    for (uint64_t off = 0; off < (1u << 20) && ok; off += sizeof b) {
        for (size_t j = 0; j < sizeof b; j++) b[j] = written(off + j, 3);
        ok = folio_write(w, b, sizeof b, off) == (int64_t)sizeof b;
    }
    CHECK(ok);
    CHECK(folio_close(w) == 0);
    CHECK(folio_cache_stats(c, &closed) == 0);
    CHECK(closed.dirty_pages >= before.dirty_pages + 200); /* most of 256 still dirty */
    /* Not `before.mappings + 1`: the new file may take the inode number of an earlier
       test's deleted file (ext4 hands a freed one out again at once), and the cache still
       holds that file's mapping, since an unlink made outside folio is not seen. The open
       then reuses that mapping, its pages dropped. Either way the remove drops one. */
    CHECK(closed.mappings >= before.mappings);
    CHECK(folio_remove_file(c, path) == 0);
    CHECK(access(path, F_OK) != 0 && errno == ENOENT);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.dirty_pages == before.dirty_pages);
    CHECK(s.mappings == closed.mappings - 1);
    CHECK(s.mappings_removed == closed.mappings_removed + 1);
    CHECK(folio_remove_file(c, path) == -ENOENT);
    /* A new file at the path starts empty: none of the old pages. */
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &w) == 0);
    CHECK(folio_file_len(w, &len) == 0 && len == 0);
    CHECK(folio_read(w, back, 100, 0) == 0);

    /* With a handle open: the file is gone from the directory, the handle still reads
       what it wrote (as an open descriptor of a deleted file does). */
    for (size_t j = 0; j < sizeof b; j++) b[j] = written(j, 4);
    CHECK(folio_write(w, b, sizeof b, 0) == (int64_t)sizeof b);
    CHECK(folio_remove_file(c, path) == 0);
    CHECK(access(path, F_OK) != 0);
    CHECK(folio_read(w, back, sizeof back, 0) == (int64_t)sizeof back);
    CHECK(memcmp(back, b, sizeof b) == 0);
    CHECK(folio_sync(w, FOLIO_SYNC_DATA, 0, 0) == 0);
    CHECK(folio_close(w) == 0);

    /* With another link: the file lives on under it, pages and dirty data included. */
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &w) == 0);
    for (size_t j = 0; j < sizeof b; j++) b[j] = written(j, 5);
    CHECK(folio_write(w, b, sizeof b, 0) == (int64_t)sizeof b);
    CHECK(folio_close(w) == 0);
    CHECK(link(path, link2) == 0);
    CHECK(folio_remove_file(c, path) == 0);
    CHECK(access(path, F_OK) != 0 && access(link2, F_OK) == 0);
    CHECK(folio_open(c, link2, &r) == 0);
    CHECK(folio_read(r, back, sizeof back, 0) == (int64_t)sizeof back);
    CHECK(memcmp(back, b, sizeof b) == 0);
    CHECK(folio_sync(r, FOLIO_SYNC_DATA, 0, 0) == 0);
    CHECK(read_disk(link2, back, sizeof back, 0) == (int64_t)sizeof back);
    CHECK(memcmp(back, b, sizeof b) == 0);
    CHECK(folio_close(r) == 0);

    /* A file the cache never opened is only unlinked. */
    CHECK(folio_remove_file(c, link2) == 0);
    CHECK(access(link2, F_OK) != 0);
    copy_pattern_file(path, 100);
    CHECK(folio_remove_file(c, path) == 0);
    CHECK(access(path, F_OK) != 0);
}

/* One thread overwrites whole 4 KiB pages with one byte value while others read them
   through a read-only handle: no read ever sees a page mixing two writes. */
struct page_reader {
    folio_file f;
    uint64_t seed;
    int reads, torn, errors;
    volatile int *stop;
};

static void *page_reader_main(void *arg) {
    struct page_reader *r = arg;
    uint8_t buf[4096];
    while (!*r->stop) {
        uint64_t page = lcg(&r->seed) % 64;
        if (folio_read(r->f, buf, sizeof buf, page * 4096) != (int64_t)sizeof buf) {
            r->errors++;
            continue;
        }
        for (size_t j = 1; j < sizeof buf; j++)
            if (buf[j] != buf[0]) { r->torn++; break; }
        r->reads++;
    }
    return NULL;
}

static void test_write_while_reading(folio_cache c) {
    enum { THREADS = 3 };
    char path[4200];
    folio_file w, r;
    pthread_t t[THREADS];
    struct page_reader pr[THREADS];
    volatile int stop = 0;
    uint8_t page[4096];
    uint64_t seed = 99;
    int ok = 1, reads = 0, torn = 0, errors = 0;

    snprintf(path, sizeof path, "%s.race", path_pattern);
    unlink(path);
    CHECK(folio_open2(c, path, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &w) == 0);
    memset(page, 0, sizeof page);
    for (uint64_t p = 0; p < 64; p++) ok = ok && folio_write(w, page, sizeof page, p * 4096) == 4096;
    CHECK(ok);
    CHECK(folio_open(c, path, &r) == 0);
    for (int i = 0; i < THREADS; i++) {
        pr[i] = (struct page_reader){.f = r, .seed = (uint64_t)i + 11, .stop = &stop};
        pthread_create(&t[i], NULL, page_reader_main, &pr[i]);
    }
    for (int i = 0; i < 20000 && ok; i++) {
        memset(page, (int)(i % 255) + 1, sizeof page);
        ok = folio_write(w, page, sizeof page, (lcg(&seed) % 64) * 4096) == 4096;
        if (i % 5000 == 4999) ok = ok && folio_sync(w, FOLIO_SYNC_DATA, 0, 0) == 0;
    }
    stop = 1;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        reads += pr[i].reads;
        torn += pr[i].torn;
        errors += pr[i].errors;
    }
    CHECK(ok);
    CHECK(reads > 0);
    CHECK(torn == 0);
    CHECK(errors == 0);
    CHECK(folio_close(r) == 0);
    CHECK(folio_close(w) == 0);
    unlink(path);
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

/* The capacity's options at creation: policy, maximum, and the dirty limit checked against
   the capacity chosen (also when that is the machine's). */
static void test_capacity_options(void) {
    folio_cache_options o;
    folio_cache c = {0};
    uint64_t capacity = 0, max = 0;
    char msg[256];

    /* Unknown policy; a maximum below the capacity. */
    folio_cache_options_init(&o);
    o.capacity_policy = 2;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    folio_last_error_message(msg, sizeof msg);
    CHECK(strstr(msg, "capacity_policy") != NULL);
    folio_cache_options_init(&o);
    o.capacity_bytes = 8u << 20;
    o.capacity_max_bytes = 4u << 20;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    folio_last_error_message(msg, sizeof msg);
    CHECK(strstr(msg, "capacity_max_bytes") != NULL);
    /* The machine's capacity, bounded by a maximum below it. (Under the machine policy
       the capacity may move as soon as the cache exists, down only here: the machine
       stalling for memory shrinks it; nothing is cached, so nothing makes it grow. The
       largest capacity never moves.) */
    o.capacity_bytes = 0;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity <= 4u << 20);
    CHECK(folio_cache_capacity_max(c, &max) == 0 && max == 4u << 20);
    CHECK(folio_cache_destroy(c) == 0);
    /* A maximum below the smallest capacity. */
    o.capacity_max_bytes = FOLIO_CAPACITY_BYTES_MIN / 2;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    /* A capacity given under the default policy is also the most the cache takes... */
    folio_cache_options_init(&o);
    o.capacity_bytes = 4u << 20;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity <= 4u << 20);
    CHECK(folio_cache_capacity_max(c, &max) == 0 && max == 4u << 20);
    CHECK(folio_cache_destroy(c) == 0);
    /* ...unless the maximum says more. */
    o.capacity_max_bytes = 64u << 20;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity <= 4u << 20);
    CHECK(folio_cache_capacity_max(c, &max) == 0 && max == 64u << 20);
    CHECK(folio_cache_destroy(c) == 0);
    /* Fixed, the capacity is exactly what was asked. */
    o.capacity_policy = FOLIO_CAPACITY_FIXED;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity == 4u << 20);
    CHECK(folio_cache_capacity_max(c, &max) == 0 && max == 64u << 20);
    CHECK(folio_cache_destroy(c) == 0);
    /* Fixed with no capacity: what the machine affords, and that is the largest. */
    folio_cache_options_init(&o);
    o.capacity_policy = FOLIO_CAPACITY_FIXED;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity >= FOLIO_CAPACITY_BYTES_MIN);
    CHECK(folio_cache_capacity_max(c, &max) == 0 && max == capacity);
    CHECK(folio_cache_destroy(c) == 0);

    /* The dirty limit against the capacity chosen: with the machine's (0), a limit of
       16 MiB is within it (the machine's memory); above a largest capacity of 8 MiB it
       is refused. */
    folio_cache_options_init(&o);
    o.dirty_limit_bytes = 16u << 20;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_capacity_max(c, &max) == 0 && max >= 16u << 20);
    CHECK(folio_cache_destroy(c) == 0);
    o.capacity_max_bytes = 8u << 20;
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    folio_last_error_message(msg, sizeof msg);
    CHECK(strstr(msg, "dirty_limit_bytes") != NULL);
    /* Up to the largest capacity, not only the starting one. */
    folio_cache_options_init(&o);
    o.capacity_bytes = 4u << 20;
    o.capacity_max_bytes = 16u << 20;
    o.dirty_limit_bytes = 16u << 20;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    /* A background threshold above the default limit of the machine's capacity. */
    folio_cache_options_init(&o);
    o.capacity_max_bytes = 4u << 20;
    o.dirty_background_bytes = 1u << 20; /* the default limit: 20% of 4 MiB */
    CHECK(folio_cache_create(&o, &c) == -EINVAL);
    folio_last_error_message(msg, sizeof msg);
    CHECK(strstr(msg, "dirty_background_bytes") != NULL);
    c.id = 0;
}

/* folio_cache_set_capacity up and down on a fixed cache, so that only these calls move
   it: the stats follow, a shrink evicts and gives memory back, dirty pages are written
   back rather than dropped, and every byte reads right at every size. */
static void test_set_capacity(void) {
    enum { BIG_BYTES = 24u << 20 };
    folio_cache_options o;
    folio_cache c, none = {0};
    folio_file f, w;
    folio_stats s;
    uint64_t capacity = 0, max = 0;
    char big[4200], dirty[4200];
    uint8_t *buf = malloc(1u << 20);
    int ok = 1;

    snprintf(big, sizeof big, "%s.big", path_pattern);
    snprintf(dirty, sizeof dirty, "%s.shrink", path_pattern);
    write_pattern_file(big, BIG_BYTES);
    unlink(dirty);
    folio_cache_options_init(&o);
    o.capacity_policy = FOLIO_CAPACITY_FIXED;
    o.capacity_bytes = 8u << 20;
    o.capacity_max_bytes = 32u << 20;
    /* Nothing writes dirty pages back but the shrink (below): no expiry for a minute,
       no write-behind. */
    o.dirty_expire_ms = 60000;
    o.write_behind_bytes = 0;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity == 8u << 20);
    CHECK(folio_cache_capacity_max(c, &max) == 0 && max == 32u << 20);

    /* Misuse: outside [MIN, max], a bad handle, NULL out pointers. Nothing changes. */
    CHECK(folio_cache_set_capacity(c, FOLIO_CAPACITY_BYTES_MIN - 4096) == -EINVAL);
    CHECK(folio_cache_set_capacity(c, (32u << 20) + 4096) == -EINVAL);
    {
        char msg[256];
        folio_last_error_message(msg, sizeof msg);
        CHECK(strstr(msg, "folio_cache_set_capacity") != NULL);
    }
    CHECK(folio_cache_set_capacity(none, 16u << 20) == -EBADF);
    CHECK(folio_cache_capacity(none, &capacity) == -EBADF);
    CHECK(folio_cache_capacity_max(none, &max) == -EBADF);
    CHECK(folio_cache_capacity(c, NULL) == -EFAULT);
    CHECK(folio_cache_capacity_max(c, NULL) == -EFAULT);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity == 8u << 20);
    CHECK(folio_cache_stats(c, &s) == 0 && s.capacity_changes == 0);

    /* Up: the whole file fits in 32 MiB, and stays (a second pass reads nothing). */
    CHECK(folio_cache_set_capacity(c, 32u << 20) == 0);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity == 32u << 20);
    CHECK(folio_open(c, big, &f) == 0);
    for (int pass = 0; pass < 2; pass++)
        for (uint64_t off = 0; off < BIG_BYTES && ok; off += 1u << 20)
            ok = folio_read(f, buf, 1u << 20, off) == 1 << 20 && matches_pattern(buf, off, 1u << 20);
    CHECK(ok);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.capacity_bytes == 32u << 20 && s.capacity_max_bytes == 32u << 20);
    CHECK(s.capacity_changes == 1);
    CHECK(s.cached_bytes >= BIG_BYTES && s.cached_bytes <= 32u << 20);
    CHECK(s.evicted_pages == 0);
    CHECK(s.resident_bytes >= BIG_BYTES);

    /* Down to 4 MiB: the cold pages go and their memory with them, before the call
       returns. */
    CHECK(folio_cache_set_capacity(c, 4u << 20) == 0);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.capacity_bytes == 4u << 20);
    CHECK(s.capacity_changes == 2);
    CHECK(s.cached_bytes <= 4u << 20);
    CHECK(s.evicted_pages > 0);
    CHECK(s.bytes_given_back >= BIG_BYTES - (4u << 20));
    CHECK(s.resident_bytes <= 4u << 20);
    if (s.resident_bytes > 4u << 20 || s.cached_bytes > 4u << 20) {
        char line[4096];
        folio_stats_format(&s, line, sizeof line);
        fprintf(stderr, "after the shrink to 4 MiB: %s\n", line);
    }
    /* Every byte still reads right in the small cache. */
    for (uint64_t off = 0; off < BIG_BYTES && ok; off += 1u << 20)
        ok = folio_read(f, buf, 1u << 20, off) == 1 << 20 && matches_pattern(buf, off, 1u << 20);
    CHECK(ok);
    CHECK(folio_cache_stats(c, &s) == 0 && s.cached_bytes <= 4u << 20);

    /* Up again to 16 MiB: the memory given back is taken again as the cache refills. */
    CHECK(folio_cache_set_capacity(c, 16u << 20) == 0);
    for (int pass = 0; pass < 2; pass++)
        for (uint64_t off = 0; off < (12u << 20) && ok; off += 1u << 20)
            ok = folio_read(f, buf, 1u << 20, off) == 1 << 20 && matches_pattern(buf, off, 1u << 20);
    CHECK(ok);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.capacity_bytes == 16u << 20 && s.capacity_changes == 3);
    CHECK(s.cached_bytes >= 12u << 20 && s.cached_bytes <= 16u << 20);
    CHECK(s.bytes_regrown > 0);
    CHECK(folio_close(f) == 0);

    /* Dirty pages are written back, not dropped, by a shrink below them: 2 MiB written
       and not synced into 32 MiB (below the default background threshold, 10% of it),
       then the smallest capacity (16 pages): what is left cached is at most that, and
       the rest reads back from the disk. */
    CHECK(folio_cache_set_capacity(c, 32u << 20) == 0);
    CHECK(folio_open2(c, dirty, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &w) == 0);
    for (uint64_t off = 0; off < (2u << 20) && ok; off += 65536) {
        for (size_t j = 0; j < 65536; j++) buf[j] = written(off + j, 3);
        ok = folio_write(w, buf, 65536, off) == 65536;
    }
    CHECK(ok);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.dirty_pages == (2u << 20) / 4096 && s.pages_written_back == 0);
    CHECK(folio_cache_set_capacity(c, FOLIO_CAPACITY_BYTES_MIN) == 0);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.capacity_bytes == FOLIO_CAPACITY_BYTES_MIN);
    CHECK(s.cached_bytes <= FOLIO_CAPACITY_BYTES_MIN);
    CHECK(s.pages_written_back >= (2u << 20) / 4096 - 16);
    CHECK(s.dirty_pages <= 16);
    CHECK(s.writeback_errors == 0);
    for (uint64_t off = 0; off < (2u << 20) && ok; off += 65536) {
        ok = folio_read(w, buf, 65536, off) == 65536;
        for (size_t j = 0; ok && j < 65536; j++) ok = buf[j] == written(off + j, 3);
    }
    CHECK(ok);
    CHECK(folio_sync(w, FOLIO_SYNC_DATA, 0, 0) == 0);
    CHECK(disk_holds_written(dirty, 2u << 20, 3));
    CHECK(folio_close(w) == 0);
    CHECK(folio_cache_destroy(c) == 0);

    /* The same with dirty limits set above the shrunk capacity: they shrink with it, so
       the shrink writes the dirty pages back at once, and writes go on afterwards. */
    unlink(dirty);
    o.capacity_bytes = 16u << 20;
    o.dirty_limit_bytes = 8u << 20;
    o.dirty_background_bytes = 8u << 20;
    CHECK(folio_cache_create(&o, &c) == 0);
    CHECK(folio_open2(c, dirty, FOLIO_OPEN_WRITE | FOLIO_OPEN_CREATE, &w) == 0);
    for (uint64_t off = 0; off < (3u << 20) && ok; off += 65536) {
        for (size_t j = 0; j < 65536; j++) buf[j] = written(off + j, 4);
        ok = folio_write(w, buf, 65536, off) == 65536;
        if (off + 65536 == 2u << 20) {
            /* 2 MiB dirty, under both limits: then the smallest capacity. */
            ok = ok && folio_cache_stats(c, &s) == 0 && s.dirty_pages == (2u << 20) / 4096;
            ok = ok && folio_cache_set_capacity(c, FOLIO_CAPACITY_BYTES_MIN) == 0;
            ok = ok && folio_cache_stats(c, &s) == 0 && s.dirty_pages <= 16 &&
                 s.cached_bytes <= FOLIO_CAPACITY_BYTES_MIN;
        }
    }
    CHECK(ok);
    CHECK(folio_cache_stats(c, &s) == 0);
    CHECK(s.alloc_failures == 0 && s.writeback_errors == 0);
    CHECK(folio_sync(w, FOLIO_SYNC_DATA, 0, 0) == 0);
    CHECK(disk_holds_written(dirty, 3u << 20, 4));
    CHECK(folio_close(w) == 0);
    CHECK(folio_cache_destroy(c) == 0);

    /* Under the default policy too: a machine-sized cache set small and back. */
    CHECK(folio_cache_create(NULL, &c) == 0);
    CHECK(folio_cache_capacity_max(c, &max) == 0);
    CHECK(folio_cache_set_capacity(c, 1u << 20) == 0);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity <= 1u << 20); /* (see above) */
    CHECK(folio_cache_set_capacity(c, max) == 0);
    CHECK(folio_cache_capacity(c, &capacity) == 0 && capacity <= max);
    CHECK(folio_cache_destroy(c) == 0);
    unlink(big);
    unlink(dirty);
    free(buf);
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

    test_persistence_survives_sigkill(argv[1]);
    test_options_and_create();
    test_last_error_message();
    test_persistence(argv[1]);
    test_adoption(argv[1]);
    test_domain();

    options_init_fixed(&o);
    o.capacity_bytes = 32u << 20;
    CHECK(folio_cache_create(&o, &c) == 0);
    test_open_errors(c);
    CHECK(folio_open(c, path_pattern, &f) == 0);
    test_reads(c, f);
    test_read_many(f);
    test_stats_format(c);
    test_readahead_and_advise(f);
    test_bad_file_handles(c, f);
    test_refresh_len(c);
    test_close_and_reuse(c);
    test_close_while_reading(c);
    test_open2(c);
    test_write_and_sync(c);
    test_write_while_reading(c);
    test_remove_file(c);
    CHECK(folio_close(f) == 0);
    CHECK(folio_cache_destroy(c) == 0);
    test_destroy_cache_under_open_files();
    test_eviction(FOLIO_EVICTION_S3FIFO);
    test_eviction(FOLIO_EVICTION_TWO_LIST_LRU);
    test_dirty_options();
    test_write_behind();
    test_capacity_options();
    test_set_capacity();

    printf("abi_test: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
