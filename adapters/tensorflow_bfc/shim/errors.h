// Errors the shim raises instead of letting TensorFlow abort, hang or corrupt its state, and
// the AntMan layer's own error for pointers it does not know. The bindings (module.cc)
// translate them into the adapter's Python exceptions.
#ifndef ANTMAN_TF_BFC_ERRORS_H_
#define ANTMAN_TF_BFC_ERRORS_H_

#include <stdexcept>
#include <string>

namespace antman_tf {

// TensorFlow 2.21 would abort the process (CHECK / LOG(FATAL)), loop forever or corrupt its
// allocator for this call; the shim refused it. Python: TensorFlowGuardError.
class GuardError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A pointer an allocator of the AntMan layer does not know (SPEC.md VMEM-7).
// Python: InvalidPointerError.
class InvalidPointer : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string HexPointer(const void* ptr);

}  // namespace antman_tf

#endif  // ANTMAN_TF_BFC_ERRORS_H_
