/* The floating-point environment of ringlet's host arithmetic.
 *
 * The host reductions, scalings, divisions and conversions (reduce.h, convert.h) run in
 * the default environment: round to nearest even, subnormals kept (no flush-to-zero,
 * no denormals-are-zero), no trap enabled. The calling thread may have set otherwise:
 * torch.set_flush_denormal(True), a library built with -Ofast (whose start-up code sets
 * flush-to-zero for the whole process), fesetround, feenableexcept. Without this, two
 * ranks whose threads differ would compute different bits where each reduces on its
 * own (one-shot, recursive doubling), a GPU rank (whose kernels never read the host's
 * settings) would differ from a CPU rank, and a trap on a NaN would kill the process.
 * Each entry point switches to the default on entry where the thread differs, and puts
 * the thread's own settings back on return, with its status flags as they were before the
 * call (the flags the call raised are then dropped; where no switch was needed they stay).
 *
 * x86-64: MXCSR (the SSE/AVX unit, which does all float and double arithmetic there).
 * aarch64: FPCR (not tested here: CI runs on x86-64). Elsewhere (32-bit x86 among them,
 * where the x87 unit computes) the caller's environment is used as it is.
 *
 * The arithmetic to protect must not move across the switch: the entry points reach it
 * through calls (a function table, a noinline function), or through volatile variables
 * (rl_fpenv_to_float). */
#ifndef RINGLET_FPENV_H
#define RINGLET_FPENV_H

#if defined(__x86_64__)
#include <xmmintrin.h>

typedef struct {
    unsigned saved;
    int changed;
} rl_fpenv;

/* Every exception masked, round to nearest, FTZ and DAZ off; the low 6 bits are the
 * status flags, which do not change how anything computes. */
#define RL_MXCSR_DEFAULT 0x1F80u
#define RL_MXCSR_STATUS 0x3Fu

static inline rl_fpenv rl_fpenv_enter(void) {
    rl_fpenv e = {_mm_getcsr(), 0};
    if ((e.saved & ~RL_MXCSR_STATUS) != RL_MXCSR_DEFAULT) {
        _mm_setcsr(RL_MXCSR_DEFAULT);
        e.changed = 1;
    }
    return e;
}

static inline void rl_fpenv_leave(rl_fpenv e) {
    if (e.changed) _mm_setcsr(e.saved);
}

#elif defined(__aarch64__)
#include <stdint.h>

typedef struct {
    uint64_t saved;
    int changed;
} rl_fpenv;

/* FPCR 0: round to nearest, FZ / FZ16 / DN off, no trap enabled (Linux's default). */
static inline rl_fpenv rl_fpenv_enter(void) {
    rl_fpenv e = {0, 0};
    __asm__ volatile("mrs %0, fpcr" : "=r"(e.saved) : : "memory");
    if (e.saved != 0) {
        __asm__ volatile("msr fpcr, %0" : : "r"((uint64_t)0) : "memory");
        e.changed = 1;
    }
    return e;
}

static inline void rl_fpenv_leave(rl_fpenv e) {
    if (e.changed) __asm__ volatile("msr fpcr, %0" : : "r"(e.saved) : "memory");
}

#else
typedef struct {
    int unused;
} rl_fpenv;
static inline rl_fpenv rl_fpenv_enter(void) {
    rl_fpenv e = {0};
    return e;
}
static inline void rl_fpenv_leave(rl_fpenv e) { (void)e; }
#endif

/* (float)x rounded to nearest whatever the thread set: a factor the host narrows for a
 * kernel. The volatile copies keep the conversion between the switches (the compiler may
 * move arithmetic on registers across them, not these loads and stores). */
static inline float rl_fpenv_to_float(double x) {
    volatile double wide = x;
    rl_fpenv e = rl_fpenv_enter();
    volatile float narrow = (float)wide;
    rl_fpenv_leave(e);
    return narrow;
}

#endif
