/* EdgeKernelBench call loop: `number` back-to-back calls of one TVM FFI function (a Relax VM's `main`),
 * each on the next of several argument sets in turn, from C.
 *
 * TVM's time evaluator calls a function in a C loop on one argument set; a judge that rotates the inputs
 * over the timed calls (so that no call sees the inputs of the call before it) needs the same loop over
 * several sets. A Python loop would add its own per-call cost (~0.3-1 us) to every contender. Built by
 * backends/call_loop.py with the host C compiler into a per-user cache, loaded with ctypes; it uses only
 * tvm-ffi's stable C ABI (tvm/ffi/c_api.h, shipped in the apache-tvm-ffi wheel).
 *
 *   ekb_call_loop(func, sets, num_args, num_sets, start, number)
 *       calls func(sets[(start + i) % num_sets]) for i in [0, number), dropping each result (a VM output
 *       goes back to its memory pool); 0 on success, else -1 (the error is taken from TVM FFI's slot and
 *       released; the caller makes the failing call again to report it).
 */

#include <stdint.h>

#include <tvm/ffi/c_api.h>

int ekb_call_loop(TVMFFIObjectHandle func, TVMFFIAny *sets, int32_t num_args, int32_t num_sets, int64_t start,
                  int64_t number) {
  if (num_sets < 1 || number < 0) return -1;
  int64_t k = start % num_sets;
  for (int64_t i = 0; i < number; ++i) {
    TVMFFIAny result;
    result.type_index = kTVMFFINone;
    result.zero_padding = 0;
    result.v_int64 = 0;
    if (TVMFFIFunctionCall(func, sets + k * num_args, num_args, &result) != 0) {
      TVMFFIObjectHandle error = NULL;
      TVMFFIErrorMoveFromRaised(&error);
      if (error != NULL) TVMFFIObjectDecRef(error);
      return -1;
    }
    if (result.type_index >= kTVMFFIStaticObjectBegin && result.v_obj != NULL) TVMFFIObjectDecRef(result.v_obj);
    if (++k == num_sets) k = 0;
  }
  return 0;
}

/* The candidate's kernel workspace, owned here while it is judged.
 *
 * A kernel's scratch buffers above the stack's size come from TVM's workspace pool (through the module's
 * __TVMBackendAllocWorkspace / __TVMBackendFreeWorkspace pointers), which hands the same memory back,
 * uncleared, call after call: a kernel could keep there the outputs of inputs it saw and skip its work when
 * they come again. The runner points a candidate library's two pointers at these functions
 * (backends/call_loop.take_workspace). The stateless timing (each kernel called alone) selects a pool of
 * its own and overwrites its free blocks before every call, outside the timed region: a kernel that keeps
 * anything across calls pays for its work there, while the timed calls' pool is left as they left it (the
 * timed calls measured beside them are not disturbed).
 *
 *   ekb_workspace_alloc / ekb_workspace_free    TVMBackendAllocWorkspace's and ...FreeWorkspace's signature:
 *       the smallest free block of the selected pool that fits, else a new one (64-byte aligned)
 *   ekb_workspace_select(pool)                  0: the timed calls' pool; 1: the stateless timing's
 *   ekb_workspace_poison()                      the selected pool's free blocks filled with 0xff (NaN, -1)
 */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void *ptr;
  uint64_t size;
  int used;
  int pool;
} ekb_block;

static ekb_block *ekb_blocks = NULL;
static int64_t ekb_nblocks = 0, ekb_capacity = 0;
static pthread_mutex_t ekb_lock = PTHREAD_MUTEX_INITIALIZER;
static int ekb_pool = 0;

void ekb_workspace_select(int pool) {
  pthread_mutex_lock(&ekb_lock);
  ekb_pool = pool;
  pthread_mutex_unlock(&ekb_lock);
}

void *ekb_workspace_alloc(int device_type, int device_id, uint64_t nbytes, int dtype_code_hint,
                          int dtype_bits_hint) {
  (void)device_id, (void)dtype_code_hint, (void)dtype_bits_hint;
  if (device_type != 1) return NULL; /* kDLCPU only: the runner takes a host library's workspace */
  if (nbytes == 0) nbytes = 1;
  void *found = NULL;
  pthread_mutex_lock(&ekb_lock);
  int64_t best = -1;
  for (int64_t i = 0; i < ekb_nblocks; ++i)
    if (!ekb_blocks[i].used && ekb_blocks[i].pool == ekb_pool && ekb_blocks[i].size >= nbytes &&
        (best < 0 || ekb_blocks[i].size < ekb_blocks[best].size))
      best = i;
  if (best >= 0) {
    ekb_blocks[best].used = 1;
    found = ekb_blocks[best].ptr;
  } else {
    if (ekb_nblocks == ekb_capacity) {
      int64_t capacity = 2 * ekb_capacity + 8;
      ekb_block *grown = realloc(ekb_blocks, sizeof(ekb_block) * (size_t)capacity);
      if (grown != NULL) ekb_blocks = grown, ekb_capacity = capacity;
    }
    void *p = NULL;
    if (ekb_nblocks < ekb_capacity && posix_memalign(&p, 64, (size_t)nbytes) == 0) {
      ekb_blocks[ekb_nblocks].ptr = p;
      ekb_blocks[ekb_nblocks].size = nbytes;
      ekb_blocks[ekb_nblocks].used = 1;
      ekb_blocks[ekb_nblocks].pool = ekb_pool;
      ++ekb_nblocks;
      found = p;
    }
  }
  pthread_mutex_unlock(&ekb_lock);
  return found;
}

int ekb_workspace_free(int device_type, int device_id, void *ptr) {
  (void)device_type, (void)device_id;
  int rc = -1;
  pthread_mutex_lock(&ekb_lock);
  for (int64_t i = 0; i < ekb_nblocks; ++i)
    if (ekb_blocks[i].ptr == ptr && ekb_blocks[i].used) {
      ekb_blocks[i].used = 0;
      rc = 0;
      break;
    }
  pthread_mutex_unlock(&ekb_lock);
  return rc;
}

void ekb_workspace_poison(void) {
  pthread_mutex_lock(&ekb_lock);
  for (int64_t i = 0; i < ekb_nblocks; ++i)
    if (!ekb_blocks[i].used && ekb_blocks[i].pool == ekb_pool)
      memset(ekb_blocks[i].ptr, 0xff, (size_t)ekb_blocks[i].size);
  pthread_mutex_unlock(&ekb_lock);
}
