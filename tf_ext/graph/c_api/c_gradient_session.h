/* tf_ext::GradientSession (gradient_session.h) for C and the language bindings on it: a
 * gradient built once from a serialized GraphDef (or a SavedModel signature: saved_model.h)
 * and run per request, from many threads at once. Tensors are TF_Tensors; errors come through
 * TF_Status (TF_INVALID_ARGUMENT, starting "GradientSession:" and naming the feed, for a
 * refused request). Link //tf_ext:graph_gradients (or the wheel's libtf_ext_c.so:
 * docs/c_api.md) and load the op library (TF_LoadLibrary) first: it holds tf_ext's ops and
 * its gradients of TensorFlow ops that have one only in Python (IdentityN, which inlined
 * function calls leave, among them). docs/gradient_session.md. */
#ifndef TF_EXT_GRAPH_C_API_C_GRADIENT_SESSION_H_
#define TF_EXT_GRAPH_C_API_C_GRADIENT_SESSION_H_

#include <stddef.h>
#include <stdint.h>

#include "tensorflow/c/c_api.h"
#include "tf_ext/version.h" /* TF_EXT_VERSION_STRING: the release of this C API */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TfExtGradientSession TfExtGradientSession;

/* Builds the gradient of the GraphDef `graph_def` (`len` bytes) of the ys (`ny` tensor names,
 * "node" or "node:index") with respect to the xs (`nx` names). `incoming_gradients`: NULL, or
 * one flag per y; a y whose flag is nonzero takes its incoming gradient as the feed
 * "d_<y node>" (vector-Jacobian products), the others ones. `max_tensor_bytes`: the largest
 * tensor a request may make shape inference find (0: half of physical memory). NULL on error. */
TfExtGradientSession* TfExtNewGradientSession(const void* graph_def, size_t len,
                                              const char* const* ys, int ny,
                                              const char* const* xs, int nx,
                                              const unsigned char* incoming_gradients,
                                              int64_t max_tensor_bytes, TF_Status* status);

/* TfExtNewGradientSession with a memory budget for the backward graph:
 * `backward_memory_budget` NULL or "" (none), a fraction in (0, 1] of the estimated peak
 * without one ("0.5"), or bytes with an optional K/M/G suffix ("512M"); the builder recomputes
 * forward tensors rather than keep them (docs/memory.md). It is planned for the placeholders'
 * own shapes, which must then be fully known. A budget it cannot meet is refused
 * (TF_RESOURCE_EXHAUSTED, naming the smallest it can meet). */
TfExtGradientSession* TfExtNewGradientSessionWithMemoryBudget(
    const void* graph_def, size_t len, const char* const* ys, int ny, const char* const* xs,
    int nx, const unsigned char* incoming_gradients, int64_t max_tensor_bytes,
    const char* backward_memory_budget, TF_Status* status);

/* TfExtNewGradientSession with options given as `num_options` (key, value) strings:
 *   max_tensor_bytes        an integer >= 0 (as above; default 0)
 *   backward_memory_budget  as TfExtNewGradientSessionWithMemoryBudget's (default none)
 *   optimize_graph          "true"/"false": TensorFlow's graph optimizations (default true)
 *   hoist_constants         "true"/"false": feed the frozen weights (default false)
 *   jit_compile             "true"/"false": run the gradient as one must-compile XLA cluster,
 *                           as tf.function(jit_compile=True) does; a graph with a node XLA
 *                           cannot compile is refused, naming it (default false; docs/xla.md)
 *   jit_compile_cache       with jit_compile: feed-shape signatures kept compiled before the
 *                           session starts afresh (default 16)
 * An unknown key or a refused value: TF_INVALID_ARGUMENT naming it. */
TfExtGradientSession* TfExtNewGradientSessionWithOptions(
    const void* graph_def, size_t len, const char* const* ys, int ny, const char* const* xs,
    int nx, const unsigned char* incoming_gradients, const char* const* option_keys,
    const char* const* option_values, int num_options, TF_Status* status);

/* The same from a SavedModel's signature (tag "serve"): `signature_key` NULL means
 * "serving_default"; ys and xs are the signature's output and input keys (every input is fed;
 * an x must be an input). The variables are read once and held as constants. */
TfExtGradientSession* TfExtNewGradientSessionFromSavedModel(
    const char* export_dir, const char* signature_key, const char* const* ys, int ny,
    const char* const* xs, int nx, const unsigned char* incoming_gradients,
    int64_t max_tensor_bytes, TF_Status* status);

/* The feeds a request gives: their number, and each one's name and dtype. Names stay valid
 * until the session is deleted. */
int TfExtGradientSessionNumInputs(const TfExtGradientSession* session);
const char* TfExtGradientSessionInputName(const TfExtGradientSession* session, int i);
TF_DataType TfExtGradientSessionInputType(const TfExtGradientSession* session, int i);

/* One request: `nfeeds` feeds by name. On success ys[i] (one per y) and dxs[i] (one per x) are
 * new TF_Tensors the caller deletes; on error they are left untouched. Thread-safe. */
void TfExtGradientSessionRun(const TfExtGradientSession* session, const char* const* feed_names,
                             TF_Tensor* const* feed_values, int nfeeds, TF_Tensor** ys,
                             TF_Tensor** dxs, TF_Status* status);

void TfExtDeleteGradientSession(TfExtGradientSession* session);

#ifdef __cplusplus
}
#endif

#endif /* TF_EXT_GRAPH_C_API_C_GRADIENT_SESSION_H_ */
