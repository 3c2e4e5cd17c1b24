/* CPUID with some feature bits hidden, in this process and the threads and processes it starts later
   (Linux x86-64; baselines/ort_isa.py).

   arch_prctl(ARCH_SET_CPUID, 0) makes the CPUID instruction fault where the CPU and the kernel support
   CPUID faulting (the setting is kept across fork and clone, reset by execve). The SIGSEGV handler below
   answers a faulting CPUID: it runs the real instruction with faulting briefly off, clears the hidden
   bits of leaf 7 (subleaves 0 and 1: where AVX-512, VNNI and AMX are announced), writes the four
   registers and steps over the instruction. Any other SIGSEGV goes to the handler that was there before
   (the fault happens again with it in place). */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static uint32_t hide[2][4]; /* leaf 7 subleaf 0 and 1: EAX, EBX, ECX, EDX bits to clear */
static struct sigaction previous;
static volatile long answered;

static void give_up(void) { sigaction(SIGSEGV, &previous, NULL); }

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    greg_t *r = ((ucontext_t *)ctx)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    if (info->si_code != SI_KERNEL || ip[0] != 0x0F || ip[1] != 0xA2) {
        give_up(); /* not a CPUID */
        return;
    }
    uint32_t leaf = (uint32_t)r[REG_RAX], sub = (uint32_t)r[REG_RCX], o[4];
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1) != 0) {
        give_up(); /* the instruction cannot be run: fail loudly rather than loop */
        return;
    }
    __cpuid_count(leaf, sub, o[0], o[1], o[2], o[3]);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    if (leaf == 7 && sub <= 1)
        for (int i = 0; i < 4; i++) o[i] &= ~hide[sub][i];
    r[REG_RAX] = o[0];
    r[REG_RBX] = o[1];
    r[REG_RCX] = o[2];
    r[REG_RDX] = o[3];
    r[REG_RIP] += 2;
    answered++;
}

/* 0: from now on CPUID hides the bits; -1: it cannot (no CPUID faulting here; errno says why). */
int ekb_hide_cpuid(const uint32_t leaf7_0[4], const uint32_t leaf7_1[4]) {
    memcpy(hide[0], leaf7_0, sizeof hide[0]);
    memcpy(hide[1], leaf7_1, sizeof hide[1]);
    if (syscall(SYS_arch_prctl, ARCH_GET_CPUID, 0) < 0) return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &previous) != 0) return -1;
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        give_up();
        return -1;
    }
    return 0;
}

/* How many CPUID instructions the handler has answered in this process (and its parent before a fork). */
long ekb_cpuid_answered(void) { return answered; }

/* The CPUID instruction as this process sees it: out = EAX, EBX, ECX, EDX of (leaf, subleaf). */
void ekb_cpuid(uint32_t leaf, uint32_t sub, uint32_t out[4]) {
    __cpuid_count(leaf, sub, out[0], out[1], out[2], out[3]);
}
