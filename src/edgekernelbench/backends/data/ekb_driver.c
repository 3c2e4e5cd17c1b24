/* EdgeKernelBench emulated-device driver: runs ONE TVM-generated kernel call, without libtvm.
 *
 * Linked statically with the kernel object (tvm.compile(..., llvm -mtriple=<cross>).write_to_file)
 * and a generated dispatch file (ekb_dispatch.c: kernel name -> __tvm_ffi_<name>), then run under
 * qemu-user:   qemu-<arch> ./ekb_driver MANIFEST
 *
 * MANIFEST (text, whitespace-separated; file names relative to the current directory):
 *   ekb-manifest 1
 *   kernel <name>
 *   threads <n>                  tasks of a parallel launch that asks for "all threads" (num_task 0)
 *   args <count>
 *   <type_code> <bits> <lanes> <ndim> <dim0> ... <dimN-1> <file>     one line per DLTensor argument
 *
 * Each argument file holds the tensor's raw bytes (C order). The kernel is called through the packed
 * ABI (TVMFFIAny args holding DLTensor pointers); afterwards EVERY argument is written back to its
 * file (outputs, and inputs so the caller can see a kernel that wrote into an input).
 *
 * Runtime symbols a kernel object may need, provided here:
 *   TVMFFIErrorSetRaisedFromCStrParts (direct call), and the function-pointer variables the LLVM
 *   codegen calls through: __TVMBackendAllocWorkspace / __TVMBackendFreeWorkspace (malloc/free),
 *   __TVMBackendParallelLaunch / __TVMBackendParallelBarrier, __TVMFFIErrorSetRaisedFromCStr.
 * A parallel launch runs its tasks one after the other in this thread, in task-id order, each with
 * penv->num_task set to the task count. Each task runs as a coroutine on its own stack, so a
 * TVMBackendParallelBarrier suspends the task until every task of the launch has reached it:
 * deterministic, and correct for kernels that synchronize.
 *
 * Exit status: 0 ok; 2 bad manifest or I/O; 3 unknown kernel; 4 the kernel raised an error (message
 * on stderr); 5 the kernel returned non-zero. A crash shows up as the emulator's signal.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <tvm/ffi/c_api.h>

typedef int32_t (*ekb_kernel_fn)(void* self, void* args, int32_t num_args, void* result);
struct ekb_kernel {
  const char* name;
  ekb_kernel_fn fn;
};
extern const struct ekb_kernel EKB_KERNELS[]; /* ekb_dispatch.c */
extern const int EKB_NUM_KERNELS;

#define EKB_ALIGN 128
#define EKB_MAX_ARGS 256
#define EKB_MAX_DIMS 16
#define EKB_TASK_STACK (8u << 20)

static int g_threads = 1;

static void die(int code, const char* fmt, const char* arg) {
  fprintf(stderr, "ekb_driver: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(code);
}

/* ------------------------------------------------------------------ errors raised by kernels */
void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t n) {
  fprintf(stderr, "%s: ", kind ? kind : "Error");
  for (int i = 0; i < n; ++i)
    if (parts[i]) fputs(parts[i], stderr);
  fputc('\n', stderr);
  fflush(stderr);
  exit(4);
}

static void ekb_set_raised(const char* kind, const char* message) {
  const char* parts[1] = {message};
  TVMFFIErrorSetRaisedFromCStrParts(kind, parts, 1);
}

/* ------------------------------------------------------------------ workspace */
static void* ekb_alloc_workspace(int device_type, int device_id, uint64_t nbytes, int code, int bits) {
  (void)device_type, (void)device_id, (void)code, (void)bits;
  size_t n = (size_t)((nbytes + EKB_ALIGN - 1) / EKB_ALIGN * EKB_ALIGN);
  void* p = NULL;
  if (posix_memalign(&p, EKB_ALIGN, n ? n : EKB_ALIGN) != 0) return NULL;
  return p;
}

static int ekb_free_workspace(int device_type, int device_id, void* ptr) {
  (void)device_type, (void)device_id;
  free(ptr);
  return 0;
}

/* ------------------------------------------------------------------ parallel launch */
typedef struct {
  void* sync_handle;
  int32_t num_task;
} ekb_penv; /* = TVMParallelGroupEnv */
typedef int (*ekb_lambda)(int task_id, ekb_penv* penv, void* cdata);

enum { TASK_READY, TASK_AT_BARRIER, TASK_DONE };
typedef struct {
  ucontext_t ctx;
  int state;
  int rc;
  void* stack;
} ekb_task;

static ekb_task* g_tasks;
static int g_cur = -1;
static ucontext_t g_sched;
static ekb_lambda g_lambda;
static void* g_cdata;
static ekb_penv g_env;

static void ekb_task_entry(void) {
  int i = g_cur;
  g_tasks[i].rc = g_lambda(i, &g_env, g_cdata);
  g_tasks[i].state = TASK_DONE; /* uc_link returns to the scheduler */
}

static int ekb_parallel_launch(ekb_lambda flambda, void* cdata, int num_task) {
  int n = num_task > 0 ? num_task : g_threads;
  if (g_tasks != NULL) { /* nested launch: run it inline, in order */
    ekb_penv env = {NULL, n};
    for (int i = 0; i < n; ++i) {
      int rc = flambda(i, &env, cdata);
      if (rc != 0) return rc;
    }
    return 0;
  }
  g_lambda = flambda, g_cdata = cdata, g_env.sync_handle = NULL, g_env.num_task = n;
  g_tasks = calloc((size_t)n, sizeof(ekb_task));
  if (!g_tasks) die(2, "%s", "out of memory (parallel tasks)");
  for (int i = 0; i < n; ++i) {
    g_tasks[i].stack = malloc(EKB_TASK_STACK);
    if (!g_tasks[i].stack || getcontext(&g_tasks[i].ctx) != 0) die(2, "%s", "cannot create a task context");
    g_tasks[i].ctx.uc_stack.ss_sp = g_tasks[i].stack;
    g_tasks[i].ctx.uc_stack.ss_size = EKB_TASK_STACK;
    g_tasks[i].ctx.uc_link = &g_sched;
    makecontext(&g_tasks[i].ctx, ekb_task_entry, 0);
  }
  for (;;) {
    for (int i = 0; i < n; ++i) {
      if (g_tasks[i].state != TASK_READY) continue;
      g_cur = i;
      swapcontext(&g_sched, &g_tasks[i].ctx); /* back when task i finishes or waits at a barrier */
    }
    int waiting = 0;
    for (int i = 0; i < n; ++i) waiting += g_tasks[i].state == TASK_AT_BARRIER;
    if (waiting == 0) break;
    if (waiting != n)
      die(5, "%s", "parallel barrier: some tasks finished without reaching it (would deadlock)");
    for (int i = 0; i < n; ++i) g_tasks[i].state = TASK_READY;
  }
  int rc = 0;
  for (int i = 0; i < n; ++i) {
    if (rc == 0) rc = g_tasks[i].rc;
    free(g_tasks[i].stack);
  }
  free(g_tasks);
  g_tasks = NULL, g_cur = -1;
  return rc;
}

static int ekb_parallel_barrier(int task_id, ekb_penv* penv) {
  (void)task_id, (void)penv;
  if (g_tasks == NULL || g_cur < 0 || g_env.num_task <= 1) return 0;
  int i = g_cur;
  g_tasks[i].state = TASK_AT_BARRIER;
  swapcontext(&g_tasks[i].ctx, &g_sched);
  return 0;
}

/* Packed calls from inside a kernel (T.call_packed) need a TVM runtime: not available here. */
static int ekb_no_packed(void) {
  ekb_set_raised("RuntimeError", "packed function calls are not available on the emulated device");
  return -1;
}

/* The variables TVM's LLVM codegen calls through (weak in the kernel object; these win). */
void* __TVMBackendAllocWorkspace = (void*)ekb_alloc_workspace;
void* __TVMBackendFreeWorkspace = (void*)ekb_free_workspace;
void* __TVMBackendParallelLaunch = (void*)ekb_parallel_launch;
void* __TVMBackendParallelBarrier = (void*)ekb_parallel_barrier;
void* __TVMFFIErrorSetRaisedFromCStr = (void*)ekb_set_raised;
void* __TVMFFIEnvModLookupFromImports = (void*)ekb_no_packed;
void* __TVMFFIFunctionCall = (void*)ekb_no_packed;

/* The same, as plain functions, for objects that call them directly. */
void* TVMBackendAllocWorkspace(int dt, int id, uint64_t nbytes, int code, int bits) {
  return ekb_alloc_workspace(dt, id, nbytes, code, bits);
}
int TVMBackendFreeWorkspace(int dt, int id, void* ptr) { return ekb_free_workspace(dt, id, ptr); }
int TVMBackendParallelLaunch(ekb_lambda f, void* cdata, int num_task) {
  return ekb_parallel_launch(f, cdata, num_task);
}
int TVMBackendParallelBarrier(int task_id, ekb_penv* penv) { return ekb_parallel_barrier(task_id, penv); }
void TVMFFIErrorSetRaisedFromCStr(const char* kind, const char* message) { ekb_set_raised(kind, message); }

/* ------------------------------------------------------------------ manifest and main */
typedef struct {
  DLTensor t;
  int64_t shape[EKB_MAX_DIMS];
  char file[512];
  size_t nbytes;
} ekb_arg;

static ekb_arg g_args[EKB_MAX_ARGS];

static void expect(FILE* f, const char* word) {
  char buf[64];
  if (fscanf(f, "%63s", buf) != 1 || strcmp(buf, word) != 0) die(2, "bad manifest: expected '%s'", word);
}

static void read_file(ekb_arg* a) {
  FILE* f = fopen(a->file, "rb");
  if (!f) die(2, "cannot open %s", a->file);
  if (a->nbytes && fread(a->t.data, 1, a->nbytes, f) != a->nbytes) die(2, "short read from %s", a->file);
  fclose(f);
}

static void write_file(ekb_arg* a) {
  FILE* f = fopen(a->file, "wb");
  if (!f) die(2, "cannot write %s", a->file);
  if (a->nbytes && fwrite(a->t.data, 1, a->nbytes, f) != a->nbytes) die(2, "short write to %s", a->file);
  if (fclose(f) != 0) die(2, "cannot write %s", a->file);
}

int main(int argc, char** argv) {
  if (argc != 2) die(2, "%s", "usage: ekb_driver MANIFEST");
  FILE* m = fopen(argv[1], "r");
  if (!m) die(2, "cannot open manifest %s", argv[1]);
  char name[512];
  int version = 0, nargs = 0;
  expect(m, "ekb-manifest");
  if (fscanf(m, "%d", &version) != 1 || version != 1) die(2, "%s", "bad manifest version");
  expect(m, "kernel");
  if (fscanf(m, "%511s", name) != 1) die(2, "%s", "bad manifest: kernel name");
  expect(m, "threads");
  if (fscanf(m, "%d", &g_threads) != 1 || g_threads < 1) die(2, "%s", "bad manifest: threads");
  expect(m, "args");
  if (fscanf(m, "%d", &nargs) != 1 || nargs < 0 || nargs > EKB_MAX_ARGS) die(2, "%s", "bad manifest: args");

  ekb_kernel_fn fn = NULL;
  for (int k = 0; k < EKB_NUM_KERNELS; ++k)
    if (strcmp(EKB_KERNELS[k].name, name) == 0) fn = EKB_KERNELS[k].fn;
  if (!fn) die(3, "kernel %s is not in this build", name);

  TVMFFIAny args[EKB_MAX_ARGS > 0 ? EKB_MAX_ARGS : 1], ret;
  memset(args, 0, sizeof(args));
  memset(&ret, 0, sizeof(ret));
  for (int i = 0; i < nargs; ++i) {
    ekb_arg* a = &g_args[i];
    unsigned code, bits, lanes;
    int ndim;
    if (fscanf(m, "%u %u %u %d", &code, &bits, &lanes, &ndim) != 4 || ndim < 0 || ndim > EKB_MAX_DIMS)
      die(2, "%s", "bad manifest: argument type");
    size_t count = 1;
    for (int d = 0; d < ndim; ++d) {
      long long v;
      if (fscanf(m, "%lld", &v) != 1 || v < 0) die(2, "%s", "bad manifest: argument shape");
      a->shape[d] = (int64_t)v;
      count *= (size_t)v;
    }
    if (fscanf(m, "%511s", a->file) != 1) die(2, "%s", "bad manifest: argument file");
    a->nbytes = count * (((size_t)bits * lanes + 7) / 8);
    void* data = NULL;
    if (posix_memalign(&data, EKB_ALIGN, a->nbytes ? a->nbytes : EKB_ALIGN) != 0) die(2, "%s", "out of memory");
    a->t.data = data;
    a->t.device.device_type = kDLCPU;
    a->t.device.device_id = 0;
    a->t.ndim = ndim;
    a->t.dtype.code = (uint8_t)code;
    a->t.dtype.bits = (uint8_t)bits;
    a->t.dtype.lanes = (uint16_t)lanes;
    a->t.shape = a->shape;
    a->t.strides = NULL;
    a->t.byte_offset = 0;
    read_file(a);
    args[i].type_index = kTVMFFIDLTensorPtr;
    args[i].v_ptr = &a->t;
  }
  fclose(m);

  int rc = fn(NULL, args, nargs, &ret);
  if (rc != 0) {
    fprintf(stderr, "ekb_driver: kernel %s returned %d\n", name, rc);
    return 5;
  }
  for (int i = 0; i < nargs; ++i) write_file(&g_args[i]);
  return 0;
}
