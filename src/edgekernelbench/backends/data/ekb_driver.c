/* EdgeKernelBench emulated-device driver: runs ONE TVM-generated kernel call, without libtvm.
 *
 * Linked statically (with -pthread) with the kernel object (tvm.compile(..., llvm -mtriple=<cross>)
 * .write_to_file) and a generated dispatch file (ekb_dispatch.c: kernel name -> __tvm_ffi_<name>), then
 * run under qemu-user:   qemu-<arch> ./ekb_driver MANIFEST
 *
 * MANIFEST (text, whitespace-separated; file names relative to the current directory):
 *   ekb-manifest 1
 *   kernel <name>
 *   threads <n>                  tasks of a parallel launch that asks for "all threads" (num_task 0)
 *   args <count>
 *   <type_code> <bits> <lanes> <ndim> <dim0> ... <dimN-1> <file>     one line per DLTensor argument
 *   stats <file>                 optional: where to write the run's statistics (below)
 *
 * Each argument file holds the tensor's raw bytes (C order). The kernel is called through the packed
 * ABI (TVMFFIAny args holding DLTensor pointers); afterwards EVERY argument is written back to its
 * file (outputs, and inputs so the caller can see a kernel that wrote into an input).
 *
 * Runtime symbols a kernel object may need, provided here:
 *   TVMFFIErrorSetRaisedFromCStrParts (direct call), and the function-pointer variables the LLVM
 *   codegen calls through: __TVMBackendAllocWorkspace / __TVMBackendFreeWorkspace (malloc/free),
 *   __TVMBackendParallelLaunch / __TVMBackendParallelBarrier, __TVMFFIErrorSetRaisedFromCStr.
 * A parallel launch of n tasks (num_task, or `threads` when the kernel asks for 0) runs them
 * CONCURRENTLY on POSIX threads: task 0 in the calling thread, tasks 1..n-1 in threads created for
 * the launch and joined at its end; every task gets the same penv (num_task = n, sync_handle = the
 * launch). qemu-user runs each guest thread on its own host thread, so data races of a multi-threaded
 * kernel can show. TVMBackendParallelBarrier is a real barrier (mutex + condition variable) across the
 * launch's tasks; a task that returns while others wait at a barrier (or reaches a barrier after
 * another task returned) would deadlock, and ends the run with exit status 5 instead. The launch
 * returns the first non-zero task return value, in task-id order. A launch from inside a task
 * (nested; TVM's own runtime refuses it) runs its tasks inline, in order, without barriers.
 *
 * Statistics (the `stats` file, "key value" lines, written after a successful call): launches (parallel
 * launches), tasks (tasks run by them), barriers (barriers the tasks of a launch all passed, summed over
 * launches), threads (most distinct OS threads that ran the tasks of one launch; 1 without a launch).
 * The whole-model program (deploy/cprogram.py) reports g_ws_peak, the most workspace held at once.
 *
 * Included by a whole-model program (deploy/cprogram.py: `ekb deploy` for a cross profile) with
 * EKB_DRIVER_NO_MAIN defined: the runtime symbols, the parallel launch, ekb_arg and read_file/write_file
 * without the manifest and main().
 *
 * Exit status: 0 ok; 2 bad manifest or I/O; 3 unknown kernel; 4 the kernel raised an error (message
 * on stderr); 5 the kernel returned non-zero (or its tasks would deadlock at a barrier). A crash shows
 * up as the emulator's signal.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
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
#define EKB_TASK_STACK (8u << 20) /* stack of each task thread */

static int g_threads = 1;
/* Held by the thread that ends the process with an error: one message, one exit, whichever task fails. */
static pthread_mutex_t g_exit_lock = PTHREAD_MUTEX_INITIALIZER;

static void die(int code, const char* fmt, const char* arg) {
  pthread_mutex_lock(&g_exit_lock);
  fprintf(stderr, "ekb_driver: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(code);
}

/* ------------------------------------------------------------------ errors raised by kernels */
void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t n) {
  pthread_mutex_lock(&g_exit_lock);
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
/* Each block carries the size asked for in a header of EKB_ALIGN bytes in front of it, so the bytes held
 * can be counted: g_ws_peak is the most asked for and held at once (tasks of a parallel launch allocate
 * concurrently). */
static size_t g_ws_now, g_ws_peak;

static void* ekb_alloc_workspace(int device_type, int device_id, uint64_t nbytes, int code, int bits) {
  (void)device_type, (void)device_id, (void)code, (void)bits;
  size_t n = (size_t)((nbytes + EKB_ALIGN - 1) / EKB_ALIGN * EKB_ALIGN);
  void* p = NULL;
  if (posix_memalign(&p, EKB_ALIGN, n + EKB_ALIGN) != 0) return NULL;
  *(size_t*)p = (size_t)nbytes;
  size_t now = __atomic_add_fetch(&g_ws_now, (size_t)nbytes, __ATOMIC_RELAXED);
  size_t peak = __atomic_load_n(&g_ws_peak, __ATOMIC_RELAXED);
  while (now > peak &&
         !__atomic_compare_exchange_n(&g_ws_peak, &peak, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return (char*)p + EKB_ALIGN;
}

static int ekb_free_workspace(int device_type, int device_id, void* ptr) {
  (void)device_type, (void)device_id;
  if (ptr == NULL) return 0;
  char* base = (char*)ptr - EKB_ALIGN;
  __atomic_sub_fetch(&g_ws_now, *(size_t*)base, __ATOMIC_RELAXED);
  free(base);
  return 0;
}

/* ------------------------------------------------------------------ parallel launch */
typedef struct {
  void* sync_handle;
  int32_t num_task;
} ekb_penv; /* = TVMParallelGroupEnv */
typedef int (*ekb_lambda)(int task_id, ekb_penv* penv, void* cdata);

typedef struct ekb_launch ekb_launch;
typedef struct {
  ekb_launch* launch;
  int id;
  int rc;
  long tid; /* the OS thread that ran the task */
  pthread_t thread;
} ekb_task;

struct ekb_launch {
  ekb_lambda flambda;
  void* cdata;
  ekb_penv env; /* shared by the tasks, as in TVM's thread pool; env.sync_handle = this launch */
  ekb_task* tasks;
  pthread_mutex_t lock; /* guards the barrier state below */
  pthread_cond_t cond;
  int arrived;    /* tasks waiting at the current barrier */
  unsigned round; /* barriers completed so far */
  int finished;   /* tasks that returned */
};

static __thread int t_in_task; /* this thread is running a task: a nested launch runs inline */
static long g_launches, g_tasks_run, g_barriers, g_max_threads = 1; /* for the stats file */

static long ekb_gettid(void) { return (long)syscall(SYS_gettid); }

static void ekb_deadlock(void) {
  die(5, "%s", "parallel barrier: some tasks finished without reaching it (would deadlock)");
}

static void ekb_run_task(ekb_task* t) {
  ekb_launch* l = t->launch;
  t->tid = ekb_gettid();
  t_in_task = 1;
  t->rc = l->flambda(t->id, &l->env, l->cdata);
  t_in_task = 0;
  pthread_mutex_lock(&l->lock);
  l->finished++;
  if (l->arrived > 0) { /* others wait at a barrier this task never reached */
    if (t->rc != 0) die(5, "%s", "a parallel task failed while other tasks wait at a barrier");
    ekb_deadlock();
  }
  pthread_mutex_unlock(&l->lock);
}

static void* ekb_task_thread(void* arg) {
  ekb_run_task((ekb_task*)arg);
  return NULL;
}

static int ekb_parallel_launch(ekb_lambda flambda, void* cdata, int num_task) {
  int n = num_task > 0 ? num_task : g_threads;
  if (t_in_task) { /* nested launch (TVM's own runtime refuses one): run it inline, in order */
    ekb_penv env = {NULL, n};
    for (int i = 0; i < n; ++i) {
      int rc = flambda(i, &env, cdata);
      if (rc != 0) return rc;
    }
    return 0;
  }
  ekb_launch l;
  memset(&l, 0, sizeof(l));
  l.flambda = flambda, l.cdata = cdata, l.env.sync_handle = &l, l.env.num_task = n;
  l.tasks = calloc((size_t)n, sizeof(ekb_task));
  if (!l.tasks) die(2, "%s", "out of memory (parallel tasks)");
  pthread_mutex_init(&l.lock, NULL);
  pthread_cond_init(&l.cond, NULL);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, EKB_TASK_STACK);
  for (int i = 0; i < n; ++i) l.tasks[i].launch = &l, l.tasks[i].id = i;
  for (int i = 1; i < n; ++i)
    if (pthread_create(&l.tasks[i].thread, &attr, ekb_task_thread, &l.tasks[i]) != 0)
      die(2, "%s", "cannot create a thread for a parallel task");
  pthread_attr_destroy(&attr);
  ekb_run_task(&l.tasks[0]); /* task 0 runs in the calling thread */
  for (int i = 1; i < n; ++i) pthread_join(l.tasks[i].thread, NULL);
  int rc = 0, distinct = 0;
  for (int i = 0; i < n; ++i) {
    if (rc == 0) rc = l.tasks[i].rc;
    int seen = 0;
    for (int j = 0; j < i && !seen; ++j) seen = l.tasks[j].tid == l.tasks[i].tid;
    distinct += !seen;
  }
  g_launches++, g_tasks_run += n, g_barriers += l.round;
  if (distinct > g_max_threads) g_max_threads = distinct;
  pthread_cond_destroy(&l.cond);
  pthread_mutex_destroy(&l.lock);
  free(l.tasks);
  return rc;
}

static int ekb_parallel_barrier(int task_id, ekb_penv* penv) {
  (void)task_id;
  ekb_launch* l = penv ? (ekb_launch*)penv->sync_handle : NULL;
  if (l == NULL || penv->num_task <= 1) return 0; /* a nested (inline) launch, or a single task */
  pthread_mutex_lock(&l->lock);
  if (l->finished > 0) ekb_deadlock();
  if (++l->arrived == penv->num_task) {
    l->arrived = 0, l->round++;
    pthread_cond_broadcast(&l->cond);
  } else {
    unsigned round = l->round;
    while (l->round == round) pthread_cond_wait(&l->cond, &l->lock);
  }
  pthread_mutex_unlock(&l->lock);
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

#ifndef EKB_DRIVER_NO_MAIN
static ekb_arg g_args[EKB_MAX_ARGS];

static void expect(FILE* f, const char* word) {
  char buf[64];
  if (fscanf(f, "%63s", buf) != 1 || strcmp(buf, word) != 0) die(2, "bad manifest: expected '%s'", word);
}
#endif

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

#ifndef EKB_DRIVER_NO_MAIN
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
  char stats[512] = "";
  char word[64];
  if (fscanf(m, "%63s", word) == 1) {
    if (strcmp(word, "stats") != 0 || fscanf(m, "%511s", stats) != 1) die(2, "%s", "bad manifest: stats");
  }
  fclose(m);

  int rc = fn(NULL, args, nargs, &ret);
  if (rc != 0) {
    fprintf(stderr, "ekb_driver: kernel %s returned %d\n", name, rc);
    return 5;
  }
  for (int i = 0; i < nargs; ++i) write_file(&g_args[i]);
  if (stats[0]) {
    FILE* f = fopen(stats, "w");
    if (!f) die(2, "cannot write %s", stats);
    fprintf(f, "launches %ld\ntasks %ld\nbarriers %ld\nthreads %ld\n", g_launches, g_tasks_run, g_barriers,
            g_max_threads);
    if (fclose(f) != 0) die(2, "cannot write %s", stats);
  }
  return 0;
}
#endif /* EKB_DRIVER_NO_MAIN */
