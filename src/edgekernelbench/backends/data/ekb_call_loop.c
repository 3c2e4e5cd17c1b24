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
