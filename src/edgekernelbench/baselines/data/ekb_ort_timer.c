/* EdgeKernelBench native ONNX Runtime timer: times a session the way a deployed C/C++ program runs it.
 *
 * Built by baselines/ort_native.py with the host C compiler into a per-user cache, loaded with ctypes.
 * It does not link against ONNX Runtime: the caller dlopens the onnxruntime package's own
 * libonnxruntime.so and passes the address of its exported `OrtGetApiBase`. No ONNX Runtime header is
 * used either: the few C API entries needed are declared below, by their slot in the OrtApi function
 * table. That table only grows (a released slot never moves), so the slots hold for every version that
 * has them; OrtApi version 5 is the first with all of them. A wrong slot would misbehave rather than
 * fail to build, which is why the Python side checks one run's outputs against the Python session's
 * before it trusts this timer.
 *
 * Use (every function returns 0 on success, else -1 with the reason in ekb_ort_error()):
 *   ekb_ort_open(get_api_base, api_version, model, len, intra, inter, optimize, &t)
 *       an environment, session options (intra-op threads, inter-op threads, sequential execution,
 *       no spinning, all graph optimizations or none) and a session from the serialized model;
 *   ekb_ort_bind(t, is_output, name, data, nbytes, shape, rank, onnx_type)
 *       binds caller-owned memory (C order) to an input or an output of the session, in its current
 *       I/O binding;
 *   ekb_ort_new_binding(t): a further I/O binding, current from then on (one per input set: the runs
 *       take the bindings in turn, so that no run sees the inputs of the run before it);
 *   ekb_ort_run_once(t), and ekb_ort_run(t, n): seconds per call over n back-to-back RunWithBinding
 *       calls, each on the next binding in turn, measured with clock_gettime(CLOCK_MONOTONIC) around the
 *       loop (negative on failure);
 *   ekb_ort_close(t) releases everything.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* OrtApi slots (index of the function pointer in the table) */
enum {
  S_GET_ERROR_MESSAGE = 2,
  S_CREATE_ENV = 3,
  S_CREATE_SESSION_FROM_ARRAY = 8,
  S_CREATE_SESSION_OPTIONS = 10,
  S_SET_SESSION_EXECUTION_MODE = 13,
  S_SET_SESSION_LOG_SEVERITY_LEVEL = 22,
  S_SET_SESSION_GRAPH_OPTIMIZATION_LEVEL = 23,
  S_SET_INTRA_OP_NUM_THREADS = 24,
  S_SET_INTER_OP_NUM_THREADS = 25,
  S_CREATE_TENSOR_WITH_DATA_AS_ORT_VALUE = 49,
  S_CREATE_CPU_MEMORY_INFO = 69,
  S_RELEASE_ENV = 92,
  S_RELEASE_STATUS = 93,
  S_RELEASE_MEMORY_INFO = 94,
  S_RELEASE_SESSION = 95,
  S_RELEASE_VALUE = 96,
  S_RELEASE_SESSION_OPTIONS = 100,
  S_ADD_SESSION_CONFIG_ENTRY = 130,
  S_RUN_WITH_BINDING = 133,
  S_CREATE_IO_BINDING = 134,
  S_RELEASE_IO_BINDING = 135,
  S_BIND_INPUT = 136,
  S_BIND_OUTPUT = 137,
};

/* values of the C API's enums used here */
enum { LOG_ERROR = 3, SEQUENTIAL = 0, OPT_NONE = 0, OPT_ALL = 99, ARENA_ALLOCATOR = 1, MEM_DEFAULT = 0 };

typedef void *status_t; /* an OrtStatus*; NULL is success */

struct api_base {
  const void *const *(*get_api)(uint32_t version);
  const char *(*version_string)(void);
};
typedef const struct api_base *(*get_api_base_fn)(void);

typedef const char *(*get_error_message_fn)(const void *status);
typedef status_t (*create_env_fn)(int level, const char *logid, void **env);
typedef status_t (*create_session_from_array_fn)(const void *env, const void *data, size_t len,
                                                 const void *options, void **session);
typedef status_t (*create_session_options_fn)(void **options);
typedef status_t (*set_int_fn)(void *options, int value);
typedef status_t (*add_config_entry_fn)(void *options, const char *key, const char *value);
typedef status_t (*create_tensor_fn)(const void *memory_info, void *data, size_t nbytes, const int64_t *shape,
                                     size_t rank, int type, void **value);
typedef status_t (*create_cpu_memory_info_fn)(int allocator_type, int mem_type, void **info);
typedef status_t (*run_with_binding_fn)(void *session, const void *run_options, const void *binding);
typedef status_t (*create_io_binding_fn)(void *session, void **binding);
typedef status_t (*bind_fn)(void *binding, const char *name, const void *value);
typedef void (*release_fn)(void *object);

#define API(slot, type) ((type)(t->api[slot]))
#define MAX_VALUES 256
#define MAX_BINDINGS 8

typedef struct ekb_ort_timer {
  const void *const *api;
  void *env, *options, *session, *memory_info, *binding; /* binding: the one ekb_ort_bind fills */
  void *bindings[MAX_BINDINGS];
  int n_bindings, next; /* the runs take bindings[next], next, ... in turn */
  void *values[MAX_VALUES];
  int n_values;
  char error[1024];
} ekb_ort_timer;

/* Takes (and releases) `status`; 0 when it was success, else -1 with "what: message" kept in t->error. */
static int check(ekb_ort_timer *t, status_t status, const char *what) {
  if (status == NULL) return 0;
  snprintf(t->error, sizeof t->error, "%s: %s", what, API(S_GET_ERROR_MESSAGE, get_error_message_fn)(status));
  API(S_RELEASE_STATUS, release_fn)(status);
  return -1;
}

static int fail(ekb_ort_timer *t, const char *message) {
  snprintf(t->error, sizeof t->error, "%s", message);
  return -1;
}

const char *ekb_ort_error(const ekb_ort_timer *t) { return t ? t->error : "out of memory"; }

const char *ekb_ort_version(void *get_api_base) {
  return ((get_api_base_fn)get_api_base)()->version_string();
}

int ekb_ort_open(void *get_api_base, uint32_t api_version, const void *model, size_t model_len, int intra_threads,
                 int inter_threads, int optimize, ekb_ort_timer **out) {
  ekb_ort_timer *t = calloc(1, sizeof *t);
  *out = t;
  if (t == NULL) return -1;
  const struct api_base *base = ((get_api_base_fn)get_api_base)();
  t->api = base->get_api(api_version);
  if (t->api == NULL) {
    snprintf(t->error, sizeof t->error, "onnxruntime %s does not support OrtApi version %u",
             base->version_string(), (unsigned)api_version);
    return -1;
  }
  if (check(t, API(S_CREATE_ENV, create_env_fn)(LOG_ERROR, "ekb-ort-timer", &t->env), "CreateEnv") ||
      check(t, API(S_CREATE_SESSION_OPTIONS, create_session_options_fn)(&t->options), "CreateSessionOptions") ||
      check(t, API(S_SET_INTRA_OP_NUM_THREADS, set_int_fn)(t->options, intra_threads), "SetIntraOpNumThreads") ||
      check(t, API(S_SET_INTER_OP_NUM_THREADS, set_int_fn)(t->options, inter_threads), "SetInterOpNumThreads") ||
      check(t, API(S_SET_SESSION_EXECUTION_MODE, set_int_fn)(t->options, SEQUENTIAL), "SetSessionExecutionMode") ||
      check(t, API(S_SET_SESSION_LOG_SEVERITY_LEVEL, set_int_fn)(t->options, LOG_ERROR),
            "SetSessionLogSeverityLevel") ||
      check(t,
            API(S_ADD_SESSION_CONFIG_ENTRY, add_config_entry_fn)(t->options, "session.intra_op.allow_spinning", "0"),
            "AddSessionConfigEntry") ||
      check(t,
            API(S_SET_SESSION_GRAPH_OPTIMIZATION_LEVEL, set_int_fn)(t->options, optimize ? OPT_ALL : OPT_NONE),
            "SetSessionGraphOptimizationLevel") ||
      check(t,
            API(S_CREATE_SESSION_FROM_ARRAY, create_session_from_array_fn)(t->env, model, model_len, t->options,
                                                                           &t->session),
            "CreateSessionFromArray") ||
      check(t, API(S_CREATE_CPU_MEMORY_INFO, create_cpu_memory_info_fn)(ARENA_ALLOCATOR, MEM_DEFAULT, &t->memory_info),
            "CreateCpuMemoryInfo") ||
      check(t, API(S_CREATE_IO_BINDING, create_io_binding_fn)(t->session, &t->binding), "CreateIoBinding"))
    return -1;
  t->bindings[t->n_bindings++] = t->binding;
  return 0;
}

int ekb_ort_new_binding(ekb_ort_timer *t) {
  if (t->binding == NULL) return fail(t, "the session is not open");
  if (t->n_bindings == MAX_BINDINGS) return fail(t, "too many input sets");
  void *binding = NULL;
  if (check(t, API(S_CREATE_IO_BINDING, create_io_binding_fn)(t->session, &binding), "CreateIoBinding")) return -1;
  t->bindings[t->n_bindings++] = t->binding = binding;
  return 0;
}

static void *next_binding(ekb_ort_timer *t) {
  void *binding = t->bindings[t->next];
  if (++t->next == t->n_bindings) t->next = 0;
  return binding;
}

int ekb_ort_bind(ekb_ort_timer *t, int is_output, const char *name, void *data, size_t nbytes, const int64_t *shape,
                 size_t rank, int onnx_type) {
  if (t->binding == NULL) return fail(t, "the session is not open");
  if (t->n_values == MAX_VALUES) return fail(t, "too many inputs and outputs to bind");
  void *value = NULL;
  if (check(t,
            API(S_CREATE_TENSOR_WITH_DATA_AS_ORT_VALUE, create_tensor_fn)(t->memory_info, data, nbytes, shape, rank,
                                                                          onnx_type, &value),
            "CreateTensorWithDataAsOrtValue"))
    return -1;
  t->values[t->n_values++] = value;
  if (is_output) return check(t, API(S_BIND_OUTPUT, bind_fn)(t->binding, name, value), "BindOutput");
  return check(t, API(S_BIND_INPUT, bind_fn)(t->binding, name, value), "BindInput");
}

int ekb_ort_run_once(ekb_ort_timer *t) {
  if (t->binding == NULL) return fail(t, "the session is not open");
  return check(t, API(S_RUN_WITH_BINDING, run_with_binding_fn)(t->session, NULL, next_binding(t)), "RunWithBinding");
}

double ekb_ort_run(ekb_ort_timer *t, int64_t n) {
  if (t->binding == NULL || n < 1) return -1.0;
  run_with_binding_fn run = API(S_RUN_WITH_BINDING, run_with_binding_fn);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int64_t i = 0; i < n; i++) {
    status_t status = run(t->session, NULL, next_binding(t));
    if (status != NULL) {
      check(t, status, "RunWithBinding");
      return -1.0;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9) / (double)n;
}

void ekb_ort_close(ekb_ort_timer *t) {
  if (t == NULL) return;
  if (t->api != NULL) {
    for (int i = 0; i < t->n_bindings; i++) API(S_RELEASE_IO_BINDING, release_fn)(t->bindings[i]);
    for (int i = 0; i < t->n_values; i++) API(S_RELEASE_VALUE, release_fn)(t->values[i]);
    if (t->memory_info) API(S_RELEASE_MEMORY_INFO, release_fn)(t->memory_info);
    if (t->session) API(S_RELEASE_SESSION, release_fn)(t->session);
    if (t->options) API(S_RELEASE_SESSION_OPTIONS, release_fn)(t->options);
    if (t->env) API(S_RELEASE_ENV, release_fn)(t->env);
  }
  free(t);
}
