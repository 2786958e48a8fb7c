/* Makes this process see a CPU without AVX-512, VNNI or AMX, so that onnxruntime (MLAS), numpy, FFmpeg
 * and x264 dispatch the kernels an AVX2-only CPU runs. Loaded with LD_PRELOAD by `streamer bench --isa
 * avx2` (streamer/bench/isa.py), active only when STREAMER_ISA_CAP=avx2.
 *
 * Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID) turns every CPUID instruction into a SIGSEGV; the
 * handler runs the real CPUID with faulting briefly off, clears the feature bits above AVX2 and steps
 * over the instruction. Faulting is inherited by new threads and reset by execve, where LD_PRELOAD
 * loads this library again. On success the constructor sets STREAMER_CPUID_MASKED=avx2, which the
 * benchmarks read to describe the machine; where the kernel or CPU lacks CPUID faulting it is not set.
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_SET_CPUID 0x1012

/* Leaf 7, subleaf 0, EBX: AVX512F, DQ, IFMA, PF, ER, CD, BW, VL. */
#define LEAF7_EBX_ABOVE_AVX2 ((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | \
                              (1u << 28) | (1u << 30) | (1u << 31))
/* Leaf 7, subleaf 0, ECX: AVX512_VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ. */
#define LEAF7_ECX_ABOVE_AVX2 ((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14))
/* Leaf 7, subleaf 0, EDX: AVX512_4VNNIW, 4FMAPS, VP2INTERSECT, AMX_BF16, AVX512_FP16, AMX_TILE, AMX_INT8. */
#define LEAF7_EDX_ABOVE_AVX2 ((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | \
                              (1u << 24) | (1u << 25))
/* Leaf 7, subleaf 1, EAX: AVX_VNNI, AVX512_BF16, AVX_IFMA. */
#define LEAF7_1_EAX_ABOVE_AVX2 ((1u << 4) | (1u << 5) | (1u << 23))
/* Leaf 0xD, subleaf 0, EAX: the opmask and ZMM state components XSAVE reports. */
#define LEAFD_EAX_AVX512_STATE ((1u << 5) | (1u << 6) | (1u << 7))

static struct sigaction previous;

static void mask(uint32_t leaf, uint32_t subleaf, uint32_t r[4]) {
    if (leaf == 7 && subleaf == 0) {
        r[1] &= ~LEAF7_EBX_ABOVE_AVX2;
        r[2] &= ~LEAF7_ECX_ABOVE_AVX2;
        r[3] &= ~LEAF7_EDX_ABOVE_AVX2;
    } else if (leaf == 7 && subleaf == 1) {
        r[0] &= ~LEAF7_1_EAX_ABOVE_AVX2;
    } else if (leaf == 0xD && subleaf == 0) {
        r[0] &= ~LEAFD_EAX_AVX512_STATE;
    }
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = (ucontext_t *)context;
    greg_t *regs = uc->uc_mcontext.gregs;
    const uint8_t *ip = (const uint8_t *)regs[REG_RIP];
    if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
        uint32_t leaf = (uint32_t)regs[REG_RAX], subleaf = (uint32_t)regs[REG_RCX], r[4];
        syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
        __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
        syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
        mask(leaf, subleaf, r);
        regs[REG_RAX] = r[0];
        regs[REG_RBX] = r[1];
        regs[REG_RCX] = r[2];
        regs[REG_RDX] = r[3];
        regs[REG_RIP] += 2;
        return;
    }
    /* A real fault: hand it to whoever handled SIGSEGV before, or let it kill the process. */
    if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction != NULL) {
        previous.sa_sigaction(sig, info, context);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    signal(SIGSEGV, SIG_DFL);
}

__attribute__((constructor)) static void start(void) {
    const char *cap = getenv("STREAMER_ISA_CAP");
    if (cap == NULL || strcmp(cap, "avx2") != 0) {
        return;
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &previous) != 0) {
        return;
    }
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        sigaction(SIGSEGV, &previous, NULL);
        return;
    }
    setenv("STREAMER_CPUID_MASKED", cap, 1);
}
