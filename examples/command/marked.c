/* A plain C program measured by GC-Bench as `kind: command` (examples/command/plan.yaml).
 *
 * It does `seconds` of CPU work (a xorshift hash over a buffer), marks the measured window
 * and reports how many items it processed through GC-Bench's control channel: the named
 * pipe in $GCBENCH_CONTROL, one line per event, each stamped with CLOCK_MONOTONIC
 * (docs/your-own-workload.md). Outside GC-Bench ($GCBENCH_CONTROL unset) it just runs.
 *
 * Build: cc -O2 -o marked marked.c      Usage: ./marked SECONDS [ITEMS_PER_STEP]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static FILE *control;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One event line, written in one write (lines under 4096 bytes are atomic on a pipe). */
static void event(const char *what) {
    if (control) {
        fprintf(control, "%s t=%.6f\n", what, now_s());
        fflush(control);
    }
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.5;
    long per_step = argc > 2 ? atol(argv[2]) : 100000;
    const char *path = getenv("GCBENCH_CONTROL");
    if (seconds <= 0 || per_step <= 0) {
        fprintf(stderr, "usage: %s SECONDS [ITEMS_PER_STEP]\n", argv[0]);
        return 2;
    }
    if (path && *path && !(control = fopen(path, "w"))) {
        perror(path);
        return 1;
    }
    uint64_t x = 88172645463325252ULL, acc = 0;
    long items = 0;
    char line[64];
    event("window begin main");
    double end = now_s() + seconds;
    while (now_s() < end) {
        for (long i = 0; i < per_step; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            acc += x;
        }
        items += per_step;
        snprintf(line, sizeof line, "count items %ld", per_step);
        event(line);
        event("step");
    }
    event("window end main");
    if (control) {
        fprintf(control, "metric checksum_mod_1000 %llu\n", (unsigned long long)(acc % 1000));
        fclose(control);
    }
    printf("%ld items, checksum %llu\n", items, (unsigned long long)acc);
    return 0;
}
