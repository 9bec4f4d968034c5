// Write access to TensorFlow's two C++ gradient registries, which TensorFlow itself only lets
// one insert into (and aborts the process on a second insert for the same op). tf_ext needs it
// for one thing: replacing TensorFlow's own gradient of an op where it is wrong
// (OverrideGradient, registry.h), so that every front end that looks the gradient up gets the
// corrected one. This file is the one place that reaches into TensorFlow's internals for it:
//  * the function registry (gradient::RegisterOp / GetOpGradientCreator) is a map returned by
//    gradient::GetOpGradFactory(), defined in core/framework/function.cc and exported by
//    libtensorflow_framework.so.2, though declared in no installed header;
//  * the client registry (ops::GradOpRegistry, cc/framework/grad_op_registry.h) keeps its map
//    in a private member, reached through an explicit instantiation (which C++ exempts from
//    access checks).
// tests/registry_override_test.cc checks that both still behave as this file assumes.
#ifndef TF_EXT_GRADS_REGISTRY_ACCESS_H_
#define TF_EXT_GRADS_REGISTRY_ACCESS_H_

#include <string>
#include <unordered_map>

#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/core/framework/function.h"

namespace tensorflow::tf_ext {

// The function registry's map (op type -> gradient creator; a null creator: no gradient).
std::unordered_map<std::string, gradient::Creator>& FunctionGradientMap();
// The client registry's map (op type -> gradient function; null: no gradient).
std::unordered_map<std::string, ops::GradFunc>& ClientGradientMap();

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_REGISTRY_ACCESS_H_
