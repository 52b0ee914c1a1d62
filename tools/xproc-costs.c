// What a cross-process protocol costs on this machine (issue 45's design figures,
// docs/sharing.md): a CAS on a line this core owns, a line moved between two processes,
// and a round trip to another process (futex, socket), wall time and the CPU of both
// sides. Build and run:
//   cc -O2 -o /tmp/xproc-costs tools/xproc-costs.c && /tmp/xproc-costs 5
// Each figure is the median of the given number of runs (default 5).
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

struct shared {
    _Alignas(64) _Atomic uint32_t ping;
    _Alignas(64) _Atomic uint32_t pong;
    _Alignas(64) double child_cpu_ns;
};

static struct shared *map_shared(void) {
    void *p = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    memset(p, 0, sizeof(struct shared));
    return p;
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val) {
    return syscall(SYS_futex, word, op, val, NULL, NULL, 0);
}

// A lock and an unlock of a word this core owns: a CAS and a release store.
static double cas_local(void) {
    static _Atomic uint64_t word;
    const int n = 10000000;
    double t0 = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < n; i++) {
        uint64_t expected = 0;
        atomic_compare_exchange_strong(&word, &expected, (uint64_t)i + 1);
        atomic_store_explicit(&word, 0, memory_order_release);
    }
    return (now_ns(CLOCK_MONOTONIC) - t0) / n;
}

// A line written alternately by two processes on two cores: half the round trip is one
// move of the line (what a lock word written by the last miss of another process costs).
// On a loaded machine either side may be descheduled mid-batch: the fastest of 50 batches
// of 1,000 round trips is the hardware's figure; a waiter yields after 4,096 spins.
static double line_move(void) {
    struct shared *s = map_shared();
    const int batches = 50, n = 1000;
    pid_t pid = fork();
    if (pid == 0) {
        pin(1);
        for (uint32_t i = 1; i <= (uint32_t)(batches * n); i++) {
            for (int spin = 0; atomic_load_explicit(&s->ping, memory_order_acquire) != i; spin++)
                if (spin > 4096) sched_yield();
            atomic_store_explicit(&s->ping, i + 0x80000000u, memory_order_release);
        }
        _exit(0);
    }
    pin(0);
    double best = 1e18;
    uint32_t i = 1;
    for (int b = 0; b < batches; b++) {
        double t0 = now_ns(CLOCK_MONOTONIC);
        for (int k = 0; k < n; k++, i++) {
            atomic_store_explicit(&s->ping, i, memory_order_release);
            for (int spin = 0; atomic_load_explicit(&s->ping, memory_order_acquire) != i + 0x80000000u; spin++)
                if (spin > 4096) sched_yield();
        }
        double per = (now_ns(CLOCK_MONOTONIC) - t0) / n / 2;
        if (per < best) best = per;
    }
    waitpid(pid, NULL, 0);
    munmap(s, sizeof *s);
    return best;
}

// A request to another process that sleeps, and its answer, over futexes: wall and CPU
// (both sides) per round trip. `same_cpu` pins both to one core (the loaded case).
static void futex_rt(int same_cpu, double *wall, double *cpu) {
    struct shared *s = map_shared();
    const int n = 5000;
    pid_t pid = fork();
    if (pid == 0) {
        pin(same_cpu ? 0 : 1);
        double c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
        for (uint32_t i = 1; i <= (uint32_t)n; i++) {
            while (atomic_load(&s->ping) != i) futex(&s->ping, FUTEX_WAIT, i - 1);
            atomic_store(&s->pong, i);
            futex(&s->pong, FUTEX_WAKE, 1);
        }
        s->child_cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
        _exit(0);
    }
    pin(0);
    double c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    double t0 = now_ns(CLOCK_MONOTONIC);
    for (uint32_t i = 1; i <= (uint32_t)n; i++) {
        atomic_store(&s->ping, i);
        futex(&s->ping, FUTEX_WAKE, 1);
        while (atomic_load(&s->pong) != i) futex(&s->pong, FUTEX_WAIT, i - 1);
    }
    *wall = (now_ns(CLOCK_MONOTONIC) - t0) / n / 1000;
    double mine = now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
    waitpid(pid, NULL, 0);
    *cpu = (mine + s->child_cpu_ns) / n / 1000;
    munmap(s, sizeof *s);
}

// The same over a Unix socket pair (the keeper's link today).
static void socket_rt(double *wall, double *cpu) {
    struct shared *s = map_shared();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) abort();
    const int n = 5000;
    char b = 0;
    pid_t pid = fork();
    if (pid == 0) {
        pin(1);
        double c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
        for (int i = 0; i < n; i++) {
            if (read(sv[1], &b, 1) != 1 || write(sv[1], &b, 1) != 1) abort();
        }
        s->child_cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
        _exit(0);
    }
    pin(0);
    double c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    double t0 = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < n; i++) {
        if (write(sv[0], &b, 1) != 1 || read(sv[0], &b, 1) != 1) abort();
    }
    *wall = (now_ns(CLOCK_MONOTONIC) - t0) / n / 1000;
    double mine = now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
    waitpid(pid, NULL, 0);
    *cpu = (mine + s->child_cpu_ns) / n / 1000;
    close(sv[0]);
    close(sv[1]);
    munmap(s, sizeof *s);
}

// A liveness check by system call (what a waiter would pay per check without a slot word).
static double pidfd_check(void) {
    int fd = syscall(SYS_pidfd_open, getppid(), 0);
    if (fd < 0) return -1;
    const int n = 200000;
    double t0 = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < n; i++) syscall(SYS_pidfd_send_signal, fd, 0, NULL, 0);
    double per = (now_ns(CLOCK_MONOTONIC) - t0) / n;
    close(fd);
    return per;
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 5;
    if (runs < 1 || runs > 64) runs = 5;
    double a[64], b[64], c[64], d[64], e[64], f[64], g[64], h[64], k[64];
    for (int r = 0; r < runs; r++) {
        a[r] = cas_local();
        b[r] = line_move();
        futex_rt(0, &c[r], &d[r]);
        futex_rt(1, &e[r], &f[r]);
        socket_rt(&g[r], &h[r]);
        k[r] = pidfd_check();
    }
    printf("medians of %d runs\n", runs);
    printf("cas+release store, own line:        %8.1f ns\n", median(a, runs));
    printf("one move of a line between cores:   %8.1f ns\n", median(b, runs));
    printf("futex round trip, two cores:        %8.2f us wall, %6.2f us CPU (both sides)\n", median(c, runs), median(d, runs));
    printf("futex round trip, one core:         %8.2f us wall, %6.2f us CPU (both sides)\n", median(e, runs), median(f, runs));
    printf("socket round trip, two cores:       %8.2f us wall, %6.2f us CPU (both sides)\n", median(g, runs), median(h, runs));
    printf("pidfd_send_signal(0) liveness:      %8.1f ns\n", median(k, runs));
    return 0;
}
