// The gradient library's C ABI, for ctypes/FFI users (Python's bridge uses TfExtGradientKind;
// tests/c_api_test.c covers every function, on valid and hostile input).
#ifndef TF_EXT_GRADS_C_API_H_
#define TF_EXT_GRADS_C_API_H_

#include <stddef.h>

// Serialized NodeDef in, serialized FunctionDef out.
// Returns 0 on success; otherwise 1 with a message in `error` (NUL-terminated, at most
// error_len bytes; `error` may be NULL) and *function_def = NULL. Garbage bytes, NULL
// pointers, lengths over INT_MAX, unknown ops and attrs that do not fit the OpDef are such
// errors. The output buffer is malloc'ed; free it with TfExtFree.
#ifdef __cplusplus
extern "C" {
#endif
int TfExtGradientFunctionDef(const void* node_def, size_t node_def_len, void** function_def,
                             size_t* function_def_len, char* error, size_t error_len);
void TfExtFree(void* p);
// LookupGradientKind for FFI users: returns the GradientKind value (0 function, 1 none,
// 2 missing, 3 unimplemented); for 3 the message is copied to `message` (NUL-terminated).
// A NULL op_type returns -1 with a message.
int TfExtGradientKind(const char* op_type, char* message, size_t message_len);
#ifdef __cplusplus
}
#endif

#endif  // TF_EXT_GRADS_C_API_H_
