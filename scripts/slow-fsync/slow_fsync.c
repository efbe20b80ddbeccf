/*
 * slow_fsync.so: a stand-in for a slower disk in benchmarks. Preloaded into a process, it makes
 * every fdatasync and fsync take at least SLOW_FSYNC_US microseconds (default 200): the call
 * runs, then the thread sleeps for what is left. The thread is blocked as on a real flush, so the
 * CPU is free meanwhile. With SLOW_FSYNC_SERIAL=1 the calls of the process also wait for each
 * other (a device that does one flush at a time). The sleep overshoots by the kernel's timer
 * slack (about 50 us here): keel's fsync histogram (`--metrics-addr`) shows the time reached.
 *
 *   cc -O2 -shared -fPIC -o slow_fsync.so scripts/slow-fsync/slow_fsync.c -ldl -lpthread
 *   LD_PRELOAD=$PWD/slow_fsync.so SLOW_FSYNC_US=150 keel up
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t one_at_a_time = PTHREAD_MUTEX_INITIALIZER;

static long minimum_ns(void) {
    const char *us = getenv("SLOW_FSYNC_US");
    return (us ? atol(us) : 200L) * 1000L;
}

static int serial(void) {
    const char *s = getenv("SLOW_FSYNC_SERIAL");
    return s && s[0] == '1';
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int padded(int (*real)(int), int fd) {
    int one = serial();
    if (one) pthread_mutex_lock(&one_at_a_time);
    long started = now_ns();
    int result = real(fd);
    long left = minimum_ns() - (now_ns() - started);
    if (left > 0) {
        struct timespec pause = {left / 1000000000L, left % 1000000000L};
        nanosleep(&pause, NULL);
    }
    if (one) pthread_mutex_unlock(&one_at_a_time);
    return result;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return padded(real, fd);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return padded(real, fd);
}
