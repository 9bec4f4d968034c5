// Gradients of TensorFlow's TensorList ops (list_ops), which TensorFlow 2.21 has only in
// Python (python/ops/list_ops.py): no C++ registry has any of them. Written from the maths of
// Python's gradients, with the same values; each is registered in both C++ registries when the
// op library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// A TensorList is a DT_VARIANT tensor holding a vector of tensors; its gradient is a list of
// the same length whose element i is the gradient of element i. An element nobody
// differentiated may stay uninitialised (TensorListReserve): TensorFlow's list kernels read it
// as zeros (Stack, GetItem, Gather with a known element shape) and AddN of two lists keeps the
// initialised one. Zeros and sums of lists (ZerosLike / AddN on DT_VARIANT), which gradient
// builders add where a list has no or several consumers, are TensorFlow's own variant kernels.
//
// Where Python's gradient returns None (indices, shapes, sizes) the C++ gradient is zeros.
// Where Python receives None for an output nobody differentiated (PopBack's list) and builds
// an empty list instead, the C++ gradient receives the builder's zeros of that list: the same
// values after the next Stack.
// Where Python uses a static shape (dtensor.shape[1:]) the C++ gradient uses the same shape
// at run time, which is never less defined.
//
// Tested in tests/python/test_list_grads.py (SymbolicGradient of functions and tf_ext_grad on
// frozen graphs, against eager GradientTape) and tests/list_grads_test.cc (the C++ client
// registry, closed forms).
#include <string>
#include <vector>

#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

using grad::GradBuilder;

// The shape of `t` without its first dimension (int32): the element shape of a list made from
// or gathered into `t`. `t` is a forward argument, or has the dtype of forward argument
// `type_of`.
std::string ShapeWithoutFirstDim(GradBuilder& b, const std::string& t,
                                 const std::string& type_of = "") {
  const std::string shape =
      b.Add({{t + "_shape"}, "Shape", {t},
             {{"T", b.TypeOf(type_of.empty() ? t : type_of)}, {"out_type", DT_INT32}}});
  b.Add(FDH::Const<int32>(t + "_from1", std::vector<int32>{1}));
  b.Add(FDH::Const<int32>(t + "_to_end", std::vector<int32>{-1}));
  // shape(t)[1:]
  return b.Add({{t + "_element_shape"},
                "Slice",
                {shape, t + "_from1", t + "_to_end"},
                {{"T", DT_INT32}, {"Index", DT_INT32}}});
}

// The int32 element shape (-1 where unknown) and the length of list `list`.
std::string ListElementShape(GradBuilder& b, const std::string& list) {
  return b.Add({{list + "_elem_shape"}, "TensorListElementShape", {list},
                {{"shape_type", DT_INT32}}});
}
std::string ListLength(GradBuilder& b, const std::string& list) {
  return b.Add({{list + "_length"}, "TensorListLength", {list}, {}});
}

// A list like `list` (its element shape and length) whose elements are all uninitialised:
// read as zeros by the list kernels, kept as they are by AddN.
std::string EmptyListLike(GradBuilder& b, const std::string& list) {
  return b.Add({{list + "_zero_list"},
                "TensorListReserve",
                {ListElementShape(b, list), ListLength(b, list)},
                {{"element_dtype", grad::Placeholder("element_dtype")}, {"shape_type", DT_INT32}}});
}

// TensorListFromTensor(tensor, element_shape): list[i] = tensor[i].
absl::Status FromTensorGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListFromTensor", attrs);
  // d(tensor)[i] = d(list)[i]: stack the list's gradient, element shape = shape(tensor)[1:]
  // (uninitialised elements become zeros of that shape; an empty list gives [0, ...]).
  b.Return("tensor",
           b.Add({{"dtensor"},
                  "TensorListStack",
                  {GradName("output_handle"), ShapeWithoutFirstDim(b, "tensor")},
                  {{"element_dtype", grad::Placeholder("element_dtype")}, {"num_elements", -1}}}));
  b.NotDifferentiable("element_shape");
  return b.Build(g);
}

// TensorListStack(list, element_shape) = [list[0], ..., list[n-1]].
absl::Status StackGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListStack", attrs);
  const std::string dtensor = GradName("tensor");
  // d(list)[i] = d(tensor)[i]
  b.Return("input_handle",
           b.Add({{"dlist"},
                  "TensorListFromTensor",
                  {dtensor, ShapeWithoutFirstDim(b, dtensor, "tensor")},
                  {{"element_dtype", grad::Placeholder("element_dtype")}, {"shape_type", DT_INT32}}}));
  b.NotDifferentiable("element_shape");
  return b.Build(g);
}

// TensorListGetItem(list, index, element_shape) = list[index].
absl::Status GetItemGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListGetItem", attrs);
  // d(list) = a list of list's length with d(list)[index] = d(item), the rest zeros
  // (uninitialised).
  b.Return("input_handle",
           b.Add({{"dlist"},
                  "TensorListSetItem",
                  {EmptyListLike(b, "input_handle"), "index", GradName("item")},
                  {{"element_dtype", grad::Placeholder("element_dtype")}}}));
  b.NotDifferentiable("index");
  b.NotDifferentiable("element_shape");
  return b.Build(g);
}

// TensorListSetItem(list, index, item) = list with list[index] replaced by item (the list first
// grown to index + 1 if resize_if_index_out_of_bounds).
absl::Status SetItemGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListSetItem", attrs);
  const bool resize = b.GetAttr<bool>("resize_if_index_out_of_bounds");
  const std::string dout = GradName("output_handle");
  const NodeAttrs elem = {{"element_dtype", grad::Placeholder("element_dtype")}};
  // d(item) = d(out)[index] (zeros of item's shape if that element is uninitialised)
  b.Add({{"item_shape"}, "Shape", {"item"}, {{"T", b.TypeOf("item")}, {"out_type", DT_INT32}}});
  b.Return("item", b.Add({{"ditem"},
                          "TensorListGetItem",
                          {dout, "index", "item_shape"},
                          {{"element_dtype", grad::Placeholder("element_dtype")},
                           {"Tshape", DT_INT32}}}));
  // d(list) = d(out) with element index zeroed: the old list[index] was overwritten
  b.Add({{"zero_item"}, "ZerosLike", {"item"}, {{"T", b.TypeOf("item")}}});
  std::string dlist = b.Add({{"dlist"}, "TensorListSetItem", {dout, "index", "zero_item"}, elem});
  if (resize) {
    // ... cut back to the input's length (the elements the resize added had no source)
    dlist = b.Add({{"dlist_resized"},
                   "TensorListResize",
                   {dlist, ListLength(b, "input_handle")},
                   {}});
  }
  b.Return("input_handle", dlist);
  b.NotDifferentiable("index");
  return b.Build(g);
}

// TensorListPushBack(list, tensor) = list + [tensor].
absl::Status PushBackGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListPushBack", attrs);
  b.Add({{"tensor_shape"}, "Shape", {"tensor"},
         {{"T", b.TypeOf("tensor")}, {"out_type", DT_INT32}}});
  // (d(list), d(tensor)) = (d(out)[:-1], d(out)[-1]): pop the last element back off
  b.Add({{"dlist", "dtensor"},
         "TensorListPopBack",
         {GradName("output_handle"), "tensor_shape"},
         {{"element_dtype", grad::Placeholder("element_dtype")}}});
  b.Return("input_handle", "dlist");
  b.Return("tensor", "dtensor");
  return b.Build(g);
}

// TensorListPopBack(list, element_shape) = (list[:-1], list[-1]).
absl::Status PopBackGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListPopBack", attrs);
  // d(list) = d(out_list) + [d(tensor)]
  b.Return("input_handle",
           b.Add({{"dlist"},
                  "TensorListPushBack",
                  {GradName("output_handle"), GradName("tensor")},
                  {{"element_dtype", grad::Placeholder("element_dtype")}}}));
  b.NotDifferentiable("element_shape");
  return b.Build(g);
}

// TensorListGather(list, indices, element_shape)[j] = list[indices[j]].
absl::Status GatherGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListGather", attrs);
  // d(list)[indices[j]] = d(values)[j], other elements zeros (uninitialised). As in Python, a
  // repeated index keeps one of its gradients (a scatter, not a sum).
  b.Return("input_handle",
           b.Add({{"dlist"},
                  "TensorListScatterIntoExistingList",
                  {EmptyListLike(b, "input_handle"), GradName("values"), "indices"},
                  {{"element_dtype", grad::Placeholder("element_dtype")}}}));
  b.NotDifferentiable("indices");
  b.NotDifferentiable("element_shape");
  return b.Build(g);
}

// TensorListScatter[V2](tensor, indices, element_shape[, num_elements]): list[indices[j]] =
// tensor[j].
absl::Status ScatterGradFor(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b(op, attrs);
  // d(tensor)[j] = d(list)[indices[j]]
  b.Return("tensor",
           b.Add({{"dtensor"},
                  "TensorListGather",
                  {GradName("output_handle"), "indices", ShapeWithoutFirstDim(b, "tensor")},
                  {{"element_dtype", grad::Placeholder("element_dtype")}}}));
  b.NotDifferentiable("indices");
  b.NotDifferentiable("element_shape");
  if (op == "TensorListScatterV2") b.NotDifferentiable("num_elements");
  return b.Build(g);
}
absl::Status ScatterGrad(const AttrSlice& attrs, FunctionDef* g) {
  return ScatterGradFor("TensorListScatter", attrs, g);
}
absl::Status ScatterV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  return ScatterGradFor("TensorListScatterV2", attrs, g);
}

// TensorListScatterIntoExistingList(list, tensor, indices): list with list[indices[j]]
// replaced by tensor[j].
absl::Status ScatterIntoExistingListGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListScatterIntoExistingList", attrs);
  const std::string dout = GradName("output_handle");
  const NodeAttrs elem = {{"element_dtype", grad::Placeholder("element_dtype")}};
  // d(tensor)[j] = d(out)[indices[j]]
  b.Return("tensor", b.Add({{"dtensor"},
                            "TensorListGather",
                            {dout, "indices", ShapeWithoutFirstDim(b, "tensor")},
                            elem}));
  // d(list) = d(out) with the overwritten elements zeroed
  b.Add({{"zero_tensor"}, "ZerosLike", {"tensor"}, {{"T", b.TypeOf("tensor")}}});
  b.Return("input_handle", b.Add({{"dlist"},
                                  "TensorListScatterIntoExistingList",
                                  {dout, "zero_tensor", "indices"},
                                  elem}));
  b.NotDifferentiable("indices");
  return b.Build(g);
}

// TensorListConcat[V2](list, ...) = (concat(list[0], ..., list[n-1]) along axis 0, lengths),
// lengths[i] = list[i].shape[0].
absl::Status ConcatGradFor(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b(op, attrs);
  // d(list)[i] = d(tensor)[offset_i : offset_i + lengths[i]]. `lengths` is the forward
  // output: passed by front ends that have it (the client registry), recomputed from the list
  // by SymbolicGradient (the op is stateless); d(lengths) is ignored (integers).
  b.Return("input_handle",
           b.Add({{"dlist"},
                  "TensorListSplit",
                  {GradName("tensor"), ListElementShape(b, "input_handle"), "lengths"},
                  {{"element_dtype", grad::Placeholder("element_dtype")}, {"shape_type", DT_INT32}}}));
  if (op == "TensorListConcatV2") {
    b.NotDifferentiable("element_shape");
    b.NotDifferentiable("leading_dims");
  }
  return b.Build(g);
}
absl::Status ConcatGrad(const AttrSlice& attrs, FunctionDef* g) {
  return ConcatGradFor("TensorListConcat", attrs, g);
}
absl::Status ConcatV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  return ConcatGradFor("TensorListConcatV2", attrs, g);
}

// TensorListSplit(tensor, element_shape, lengths): list[i] = tensor[offset_i : offset_i +
// lengths[i]].
absl::Status SplitGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListSplit", attrs);
  // Element shape [-1] + shape(tensor)[1:]: each piece's leading dim is its own length.
  b.Add(FDH::Const<int32>("minus_one", std::vector<int32>{-1}));
  b.Add(FDH::Const<int32>("axis0", 0));
  const std::string rest = ShapeWithoutFirstDim(b, "tensor");
  b.Add({{"piece_shape"},
         "ConcatV2",
         {"minus_one", rest, "axis0"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
  // d(tensor) = concat(d(list)[0], ..., d(list)[n-1]) along axis 0; leading_dims = lengths gives
  // an uninitialised element its rows of zeros.
  b.Add({{"dtensor", "dtensor_lengths"},
         "TensorListConcatV2",
         {GradName("output_handle"), "piece_shape", "lengths"},
         {{"element_dtype", grad::Placeholder("element_dtype")}, {"shape_type", DT_INT32}}});
  b.Return("tensor", "dtensor");
  b.NotDifferentiable("element_shape");
  b.NotDifferentiable("lengths");
  return b.Build(g);
}

// TensorListResize(list, size): list cut to, or padded (uninitialised) to, `size` elements.
absl::Status ResizeGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TensorListResize", attrs);
  // d(list) = d(out) resized back to list's length: dropped elements had no effect, padded
  // ones no source.
  b.Return("input_handle", b.Add({{"dlist"},
                                  "TensorListResize",
                                  {GradName("output_handle"), ListLength(b, "input_handle")},
                                  {}}));
  b.NotDifferentiable("size");
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("TensorListFromTensor", FromTensorGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListStack", StackGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListGetItem", GetItemGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListSetItem", SetItemGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListPushBack", PushBackGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListPopBack", PopBackGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListGather", GatherGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListScatter", ScatterGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListScatterV2", ScatterV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListScatterIntoExistingList", ScatterIntoExistingListGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListConcat", ConcatGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListConcatV2", ConcatV2Grad);
// Front ends that have the forward node pass Concat's outputs (its lengths) instead of
// recomputing the concatenation.
static const bool concat_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("TensorListConcat"),
     DeclareReadsForwardOutputs("TensorListConcatV2"), true);
TF_EXT_REGISTER_TF_GRADIENT("TensorListSplit", SplitGrad);
TF_EXT_REGISTER_TF_GRADIENT("TensorListResize", ResizeGrad);
// Not differentiable, as in Python (list_ops.py): integer results, or (ConcatLists,
// PushBackBatch) no gradient in any registry.
TF_EXT_REGISTER_TF_GRADIENT("TensorListLength", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorListElementShape", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorListConcatLists", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorListPushBackBatch", nullptr);
// Lists made from integers only (a shape and a size): no input carries a gradient. Python
// registers nothing, its builder never asks; TensorFlow's C++ builder asks every op upstream
// of y, so these must say "not differentiable" rather than be missing.
TF_EXT_REGISTER_TF_GRADIENT("EmptyTensorList", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("TensorListReserve", nullptr);

}  // namespace tensorflow::tf_ext
