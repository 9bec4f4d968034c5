#include "tf_ext/grads/side_table.h"

namespace tensorflow::tf_ext {

void SideTable::Insert(const std::string& op_type, gradient::Creator creator) const {
  gradient::Creator existing;
  if (gradient::GetOpGradientCreator(Key(op_type), &existing).ok()) return;
  gradient::RegisterOp(Key(op_type), std::move(creator));
}

bool SideTable::Find(const std::string& op_type, gradient::Creator* creator) const {
  gradient::Creator found;
  if (!gradient::GetOpGradientCreator(Key(op_type), &found).ok() || !found) return false;
  *creator = std::move(found);
  return true;
}

const SideTable& SurrogateForwards() {
  static const SideTable* table = new SideTable("surrogate_forward");
  return *table;
}

const SideTable& UnimplementedGradients() {
  static const SideTable* table = new SideTable("unimplemented");
  return *table;
}

const SideTable& ForwardOutputReaders() {
  static const SideTable* table = new SideTable("reads_forward_outputs");
  return *table;
}

const SideTable& GradientReads() {
  static const SideTable* table = new SideTable("gradient_reads");
  return *table;
}

const SideTable& AddedTfGradients() {
  static const SideTable* table = new SideTable("added_tf_gradient");
  return *table;
}

const SideTable& OverriddenGradients() {
  static const SideTable* table = new SideTable("overridden_gradient");
  return *table;
}

const SideTable& ReplacedTfGradients() {
  static const SideTable* table = new SideTable("replaced_tf_gradient");
  return *table;
}

}  // namespace tensorflow::tf_ext
